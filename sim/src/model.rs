//! Deterministic model behaviour, driven by directives in the last user message.
//!
//! Tests need a "model" whose next move they can predict: call a tool N times, then answer with
//! a known text. Directives (see the crate docs) say what to do; the conversation so far (how many
//! assistant messages already carry tool calls) says where in that plan the request is, so the
//! same request always gets the same answer.

use serde::Deserialize;

use crate::ids;

/// The request fields the simulator reads; other OpenAI fields are accepted and ignored.
#[derive(Debug, Deserialize)]
pub(crate) struct ChatRequest {
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default)]
    pub messages: Option<Vec<Message>>,
    #[serde(default)]
    pub tools: Option<Vec<Tool>>,
    #[serde(default)]
    pub stream: Option<bool>,
    #[serde(default)]
    pub max_tokens: Option<u64>,
    #[serde(default)]
    pub max_completion_tokens: Option<u64>,
    /// OpenRouter's Usage Accounting switch, `{"include": true}`; read leniently (any other
    /// value asks for nothing) since the real service ignores it now.
    #[serde(default)]
    pub usage: Option<serde_json::Value>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct Message {
    #[serde(default)]
    pub role: String,
    #[serde(default)]
    pub content: Option<Content>,
    #[serde(default)]
    pub tool_calls: Option<Vec<ToolCallIn>>,
}

/// A tool call of an earlier assistant turn, as the client sent it back.
#[derive(Debug, Deserialize)]
pub(crate) struct ToolCallIn {
    #[serde(default)]
    pub id: Option<String>,
    #[serde(default)]
    pub function: Option<ToolCallInFunction>,
    #[serde(default)]
    pub extra_content: Option<serde_json::Value>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct ToolCallInFunction {
    #[serde(default)]
    pub name: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(crate) enum Content {
    Text(String),
    Parts(Vec<Part>),
}

#[derive(Debug, Deserialize)]
pub(crate) struct Part {
    #[serde(default)]
    pub text: Option<String>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct Tool {
    #[serde(default)]
    pub function: Option<ToolFunction>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct ToolFunction {
    pub name: String,
}

/// A request that passed validation.
#[derive(Debug)]
pub(crate) struct Request {
    pub model: String,
    pub stream: bool,
    pub max_tokens: Option<u64>,
    /// The request asked for usage accounting (`"usage": {"include": true}`).
    pub usage_include: bool,
    messages: Vec<Message>,
    tools: Vec<Tool>,
}

/// Parses and validates a chat request body; the error is the 400 message.
pub(crate) fn parse(body: &[u8]) -> Result<Request, String> {
    let req: ChatRequest =
        serde_json::from_slice(body).map_err(|e| format!("Invalid JSON in request body: {e}"))?;
    let model = match req.model {
        Some(m) if !m.trim().is_empty() => m,
        _ => return Err("No model specified: the request body must set \"model\"".to_owned()),
    };
    let messages = match req.messages {
        Some(m) if !m.is_empty() => m,
        // OpenRouter's own wording for a request without input.
        _ => return Err("Input required: specify \"prompt\" or \"messages\"".to_owned()),
    };
    Ok(Request {
        model,
        stream: req.stream.unwrap_or(false),
        max_tokens: req.max_tokens.or(req.max_completion_tokens),
        usage_include: req
            .usage
            .as_ref()
            .and_then(|u| u.get("include"))
            .and_then(serde_json::Value::as_bool)
            .unwrap_or(false),
        messages,
        tools: req.tools.unwrap_or_default(),
    })
}

impl Message {
    fn text_len(&self) -> usize {
        match &self.content {
            Some(Content::Text(t)) => t.len(),
            Some(Content::Parts(parts)) => parts
                .iter()
                .filter_map(|p| p.text.as_deref())
                .map(str::len)
                .sum(),
            None => 0,
        }
    }

    fn text(&self) -> String {
        match &self.content {
            Some(Content::Text(t)) => t.clone(),
            Some(Content::Parts(parts)) => parts
                .iter()
                .filter_map(|p| p.text.as_deref())
                .collect::<Vec<_>>()
                .join(" "),
            None => String::new(),
        }
    }

    fn tool_call_count(&self) -> usize {
        if self.role == "assistant" {
            self.tool_calls.as_ref().map_or(0, Vec::len)
        } else {
            0
        }
    }
}

/// One tool call the model makes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ToolCall {
    pub id: String,
    pub name: String,
    pub arguments: String,
    /// Gemini's `extra_content.google.thought_signature`: on the first call of a turn only.
    pub thought_signature: Option<String>,
}

/// How a provider lays out the tool calls of a turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CallStyle {
    /// OpenAI's: each call streamed as an opening delta and argument fragments under its `index`.
    Deltas,
    /// Gemini's OpenAI-compatible endpoint: each call whole in one chunk, without `index`, the
    /// turn's thought signature on its first call, and a streamed turn finishing with `stop`
    /// (docs/providers.md §5.2).
    Gemini,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Reply {
    Text(String),
    Tools(Vec<ToolCall>),
}

impl Reply {
    pub(crate) fn finish_reason(&self) -> &'static str {
        match self {
            Reply::Text(_) => "stop",
            Reply::Tools(_) => "tool_calls",
        }
    }
}

/// What the model answers to one request, with its token counts.
#[derive(Debug)]
pub(crate) struct Turn {
    pub reply: Reply,
    pub style: CallStyle,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// The raw text of the last user message (moderation faults quote it).
    pub user_text: String,
}

/// The directives found in a user message.
#[derive(Debug, Default, PartialEq, Eq)]
struct Directives {
    tools: usize,
    tool: Option<String>,
    answer: Option<String>,
    parallel: usize,
}

/// Splits `[[name:value]]` directives out of `text`; unknown or malformed ones stay as text.
/// Returns the directives and the remaining text with whitespace collapsed.
fn split_directives(text: &str) -> (Directives, String) {
    let mut d = Directives {
        parallel: 1,
        ..Directives::default()
    };
    let mut rest = String::with_capacity(text.len());
    let mut tail = text;
    while let Some(open) = tail.find("[[") {
        rest.push_str(&tail[..open]);
        let after = &tail[open + 2..];
        let Some(close) = after.find("]]") else {
            rest.push_str(&tail[open..]);
            tail = "";
            break;
        };
        if apply_directive(&mut d, &after[..close]) {
            tail = &after[close + 2..];
        } else {
            // Not ours: keep the brackets and look for a directive inside them.
            rest.push_str("[[");
            tail = after;
        }
    }
    rest.push_str(tail);
    let clean = rest.split_whitespace().collect::<Vec<_>>().join(" ");
    (d, clean)
}

fn apply_directive(d: &mut Directives, inner: &str) -> bool {
    let Some((name, value)) = inner.split_once(':') else {
        return false;
    };
    match name {
        "tools" => value.parse().map(|n| d.tools = n).is_ok(),
        "tool" if !value.is_empty() => {
            d.tool = Some(value.to_owned());
            true
        }
        "answer" => {
            d.answer = Some(value.to_owned());
            true
        }
        "parallel" => match value.parse() {
            Ok(m) if m >= 1 => {
                d.parallel = m;
                true
            }
            _ => false,
        },
        _ => false,
    }
}

/// The upstream provider named in successful responses (`provider`, docs/providers.md §1.2).
pub(crate) const SERVING_PROVIDER: &str = "Chutes";

/// The model `openrouter/free` reports as the one it routed to (docs/providers.md §1.2: the
/// response names the model that actually served).
const FREE_ROUTER_PICK: &str = "meta-llama/llama-3.3-70b-instruct:free";

/// The `model` field of the response.
pub(crate) fn served_model(requested: &str) -> &str {
    if requested == "openrouter/free" {
        FREE_ROUTER_PICK
    } else {
        requested
    }
}

/// The first earlier tool call whose turn lacks the thought signature Gemini gave it: the name
/// and position Gemini's 400 quotes (docs/providers.md §5.2). Only the first call of a turn
/// carries one, so only it is checked.
pub(crate) fn missing_signature(req: &Request) -> Option<(String, usize)> {
    let turns = req.messages.iter().filter(|m| m.role != "system");
    for (position, message) in turns.enumerate() {
        let Some(first) = message.tool_calls.as_ref().and_then(|calls| calls.first()) else {
            continue;
        };
        if message.role != "assistant" {
            continue;
        }
        let sent = first
            .extra_content
            .as_ref()
            .and_then(|e| e.pointer("/google/thought_signature"))
            .and_then(serde_json::Value::as_str);
        let expected = first.id.as_deref().map(ids::thought_signature);
        if expected.is_none() || sent != expected.as_deref() {
            let name = first
                .function
                .as_ref()
                .and_then(|f| f.name.clone())
                .unwrap_or_default();
            return Some((name, position + 1));
        }
    }
    None
}

/// Decides the model's answer to `req`, its tool calls laid out in `style`.
pub(crate) fn respond(req: &Request, style: CallStyle) -> Turn {
    let prompt_chars: usize = req.messages.iter().map(Message::text_len).sum();
    let user_text = req
        .messages
        .iter()
        .rev()
        .find(|m| m.role == "user")
        .map(Message::text)
        .unwrap_or_default();
    let (d, clean) = split_directives(&user_text);

    let tool_turns = req
        .messages
        .iter()
        .filter(|m| m.tool_call_count() > 0)
        .count();
    let tool_name = d.tool.clone().or_else(|| {
        req.tools
            .iter()
            .find_map(|t| t.function.as_ref().map(|f| f.name.clone()))
    });

    let reply = match tool_name {
        Some(name) if tool_turns < d.tools => {
            let calls_so_far: usize = req.messages.iter().map(Message::tool_call_count).sum();
            Reply::Tools(
                (1..=d.parallel)
                    .map(|i| {
                        let id = ids::tool_call_id();
                        let signed = style == CallStyle::Gemini && i == 1;
                        ToolCall {
                            thought_signature: signed.then(|| ids::thought_signature(&id)),
                            id,
                            name: name.clone(),
                            arguments: format!("{{\"step\":{}}}", calls_so_far + i),
                        }
                    })
                    .collect(),
            )
        }
        _ => Reply::Text(d.answer.unwrap_or_else(|| format!("Echo: {clean}"))),
    };
    let completion_tokens = match &reply {
        Reply::Text(t) => t.split_whitespace().count() as u64,
        Reply::Tools(calls) => {
            let chars: usize = calls.iter().map(|c| c.name.len() + c.arguments.len()).sum();
            chars.div_ceil(4) as u64
        }
    };
    Turn {
        reply,
        style,
        prompt_tokens: prompt_chars.div_ceil(4) as u64,
        completion_tokens,
        user_text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directives_are_removed_and_unknown_brackets_kept() {
        let (d, clean) =
            split_directives("Plan [[tools:2]] a [[x]] trip [[tool:search]] [[answer:Done: ok]]");
        assert_eq!(d.tools, 2);
        assert_eq!(d.tool.as_deref(), Some("search"));
        assert_eq!(d.answer.as_deref(), Some("Done: ok"));
        assert_eq!(d.parallel, 1);
        assert_eq!(clean, "Plan a [[x]] trip");
    }

    #[test]
    fn malformed_directives_stay_text() {
        let (d, clean) = split_directives("[[tools:many]] [[parallel:0]] [[answer:unclosed");
        assert_eq!(d.tools, 0);
        assert_eq!(d.parallel, 1);
        assert_eq!(clean, "[[tools:many]] [[parallel:0]] [[answer:unclosed");
    }

    fn request(body: &str) -> Request {
        match parse(body.as_bytes()) {
            Ok(r) => r,
            Err(e) => panic!("test body rejected: {e}"),
        }
    }

    #[test]
    fn tool_turns_count_down_then_answer() {
        let tools = r#""tools":[{"type":"function","function":{"name":"lookup"}}]"#;
        let first = request(&format!(
            r#"{{"model":"m","messages":[{{"role":"user","content":"go [[tools:2]] [[parallel:2]]"}}],{tools}}}"#
        ));
        let Reply::Tools(calls) = respond(&first, CallStyle::Deltas).reply else {
            panic!("expected tool calls")
        };
        assert_eq!(calls.len(), 2);
        assert_eq!(calls[0].name, "lookup");
        assert_eq!(calls[1].arguments, r#"{"step":2}"#);

        let done = request(&format!(
            r#"{{"model":"m","messages":[{{"role":"user","content":"go [[tools:1]]"}},
              {{"role":"assistant","content":null,"tool_calls":[{{"id":"a"}}]}},
              {{"role":"tool","tool_call_id":"a","content":"x"}}],{tools}}}"#
        ));
        assert_eq!(
            respond(&done, CallStyle::Deltas).reply,
            Reply::Text("Echo: go".to_owned())
        );
    }

    #[test]
    fn missing_model_and_empty_messages_are_rejected() {
        assert!(parse(br#"{"messages":[{"role":"user","content":"x"}]}"#).is_err());
        assert!(parse(br#"{"model":"m","messages":[]}"#).is_err());
        assert!(parse(b"{not json").is_err());
    }
}
