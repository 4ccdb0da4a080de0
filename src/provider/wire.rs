//! The OpenAI chat-completions JSON, both ways, without I/O.
//!
//! `chat::Message` derives its own serde shape for the store (tool calls flat as
//! `{id, name, arguments}`); providers want the nested OpenAI shape, so the request is written
//! here. Responses are read from `serde_json::Value` rather than typed structs because real
//! providers disagree on field presence, `null`s and types (numeric or string error codes,
//! arguments as text or as an object): each field is read leniently, and only what the engine
//! cannot do without (choices, a tool call's name) makes a response malformed.

use super::{CallError, ChatRequest, Completion, InBandError, TransportError};
use crate::chat::{Message, Role, TURN_FIELDS, ToolCall, ToolSpec, Usage};
use serde::Serialize;
use serde_json::{Map, Value};

#[derive(Serialize)]
struct WireRequest<'a> {
    model: &'a str,
    messages: Vec<WireMessage<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<WireTool<'a>>,
    stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    usage: Option<UsageAccounting>,
}

/// OpenRouter's usage accounting: `usage: {include: true}` asks the answer's usage to say what
/// the call cost (`usage.cost`, USD).
#[derive(Serialize)]
struct UsageAccounting {
    include: bool,
}

#[derive(Serialize)]
struct WireMessage<'a> {
    role: Role,
    // Always present: an assistant turn that only calls tools carries `content: null`.
    content: Option<&'a str>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tool_calls: Vec<WireToolCall<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_call_id: Option<&'a str>,
    /// The turn's provider fields, back as they came (`reasoning_details`, …).
    #[serde(flatten)]
    turn_fields: &'a Map<String, Value>,
}

#[derive(Serialize)]
struct WireToolCall<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    function: WireFunctionCall<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    extra_content: Option<&'a Value>,
}

#[derive(Serialize)]
struct WireFunctionCall<'a> {
    name: &'a str,
    arguments: &'a str,
}

#[derive(Serialize)]
struct WireTool<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    function: WireFunction<'a>,
}

#[derive(Serialize)]
struct WireFunction<'a> {
    name: &'a str,
    description: &'a str,
    parameters: &'a Value,
}

/// The JSON body of `POST …/chat/completions`.
pub(super) fn request_body(request: &ChatRequest) -> Result<Vec<u8>, serde_json::Error> {
    serde_json::to_vec(&WireRequest {
        model: &request.model,
        messages: request.messages.iter().map(wire_message).collect(),
        tools: request.tools.iter().map(wire_tool).collect(),
        stream: request.stream,
        max_tokens: request.max_tokens,
        usage: request
            .ask_cost
            .then_some(UsageAccounting { include: true }),
    })
}

fn wire_message(message: &Message) -> WireMessage<'_> {
    WireMessage {
        role: message.role,
        content: message.content.as_deref(),
        tool_calls: message
            .tool_calls
            .iter()
            .map(|call| WireToolCall {
                id: &call.id,
                kind: "function",
                function: WireFunctionCall {
                    name: &call.name,
                    arguments: &call.arguments,
                },
                extra_content: call.extra_content.as_ref(),
            })
            .collect(),
        tool_call_id: message.tool_call_id.as_deref(),
        turn_fields: &message.turn_fields,
    }
}

fn wire_tool(tool: &ToolSpec) -> WireTool<'_> {
    WireTool {
        kind: "function",
        function: WireFunction {
            name: &tool.name,
            description: &tool.description,
            parameters: &tool.parameters,
        },
    }
}

pub(super) fn malformed(why: impl Into<String>) -> CallError {
    CallError::Transport(TransportError::Malformed(why.into()))
}

/// A non-empty string field, or `None` (absent, `null`, another type).
pub(super) fn str_field(value: &Value, key: &str) -> Option<String> {
    value
        .get(key)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
}

/// Usage as far as it was reported; `None` when the field is absent or not an object.
pub(super) fn usage(value: &Value) -> Option<Usage> {
    let usage = value.get("usage")?.as_object()?;
    let count = |key: &str| usage.get(key).and_then(Value::as_u64).unwrap_or(0);
    Some(Usage {
        prompt_tokens: count("prompt_tokens"),
        completion_tokens: count("completion_tokens"),
        total_tokens: count("total_tokens"),
    })
}

/// What a call cost in USD, as its usage says (`usage.cost`); `None` when absent, negative or
/// not a number.
pub(super) fn cost(value: &Value) -> Option<f64> {
    let cost = value.get("usage")?.get("cost")?.as_f64()?;
    (cost.is_finite() && cost >= 0.0).then_some(cost)
}

/// Whether a JSON object is itself an error: a top-level `code` or `message` and no `choices`
/// (docs/design.md §2.3). DashScope-compatible servers send `{"code":"Throttling.RateQuota",
/// "message":…}` that way, in a stream and as a body, and Mistral `{"object":"error",…}`.
pub fn is_bare_error(value: &Value) -> bool {
    let present = |key: &str| value.get(key).is_some_and(|v| !v.is_null());
    value.get("choices").is_none() && (present("code") || present("message"))
}

/// Reads an `error` member: `code` may be a number, a numeric string, a word or `null`.
pub(super) fn in_band_error(error: &Value) -> InBandError {
    let (code, code_text) = match error.get("code") {
        Some(Value::Number(n)) => (n.as_u64().and_then(|n| u16::try_from(n).ok()), None),
        Some(Value::String(s)) => match s.trim().parse::<u16>() {
            Ok(n) => (Some(n), None),
            Err(_) => (None, Some(s.clone())),
        },
        _ => (None, None),
    };
    // The documented availability error has no `code`, only `http_status`.
    let code = code.or_else(|| {
        error
            .get("http_status")
            .and_then(Value::as_u64)
            .and_then(|n| u16::try_from(n).ok())
    });
    let message = match error {
        Value::String(s) => s.clone(),
        _ => error
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned(),
    };
    InBandError {
        code,
        code_text,
        // A provider may send megabytes here; what is kept is quoted in attempts and logs.
        message: crate::text::cut(&message, crate::text::MAX_ERROR_BYTES),
        error: error.clone(),
    }
}

/// The error a choice ended with when its `finish_reason` is `"error"`: its own `error`, else the
/// chunk's top-level one, else a stand-in so the failure is never mistaken for an answer.
pub(super) fn finish_error(choice: &Value, top: &Value) -> InBandError {
    match choice
        .get("error")
        .or_else(|| top.get("error"))
        .filter(|e| !e.is_null())
    {
        Some(error) => in_band_error(error),
        None => InBandError {
            code: None,
            code_text: None,
            message: "the provider ended the answer with finish_reason \"error\"".to_owned(),
            error: Value::Null,
        },
    }
}

/// `arguments` is JSON text on the wire; a few providers send the object itself.
pub(super) fn arguments_text(arguments: Option<&Value>) -> String {
    match arguments {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    }
}

/// A complete (non-streaming) tool call.
fn tool_call(value: &Value, position: usize) -> Result<ToolCall, CallError> {
    let function = value.get("function").unwrap_or(&Value::Null);
    let name = str_field(function, "name")
        .ok_or_else(|| malformed(format!("tool call {position} has no function name")))?;
    Ok(ToolCall {
        id: str_field(value, "id").unwrap_or_default(),
        name,
        arguments: arguments_text(function.get("arguments")),
        extra_content: value.get("extra_content").filter(|v| !v.is_null()).cloned(),
    })
}

/// The [`TURN_FIELDS`] an assistant message carries, verbatim.
pub(super) fn turn_fields(message: &Value) -> Map<String, Value> {
    TURN_FIELDS
        .iter()
        .filter_map(|&k| {
            Some((
                k.to_string(),
                message.get(k).filter(|v| !v.is_null())?.clone(),
            ))
        })
        .collect()
}

/// The text of `content`: a string, or nothing (`null`, absent).
pub(super) fn content_text(holder: &Value) -> Result<Option<&str>, CallError> {
    match holder.get("content") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(malformed("content is neither text nor null")),
    }
}

/// Parses a whole non-streaming `200` body.
pub(super) fn completion(body: &[u8]) -> Result<Completion, CallError> {
    let value: Value =
        serde_json::from_slice(body).map_err(|e| malformed(format!("body is not JSON: {e}")))?;
    if !value.is_object() {
        return Err(malformed("body is not a JSON object"));
    }
    let choice = match value.get("choices") {
        None | Some(Value::Null) => None,
        Some(Value::Array(choices)) => choices.first(),
        Some(_) => return Err(malformed("choices is not an array")),
    };
    let top_error = value
        .get("error")
        .filter(|e| !e.is_null())
        .or_else(|| is_bare_error(&value).then_some(&value));
    let Some(choice) = choice else {
        return Err(match top_error {
            Some(error) => CallError::InBand {
                error: in_band_error(error),
                partial: String::new(),
            },
            None => malformed("no choices"),
        });
    };
    let message = choice.get("message").unwrap_or(&Value::Null);
    let text = content_text(message)?.unwrap_or_default().to_owned();
    let finish_reason = str_field(choice, "finish_reason");
    if finish_reason.as_deref() == Some("error") || top_error.is_some() {
        return Err(CallError::InBand {
            error: finish_error(choice, &value),
            partial: text,
        });
    }
    let tool_calls = match message.get("tool_calls") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(calls)) => calls
            .iter()
            .enumerate()
            .map(|(i, c)| tool_call(c, i))
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(malformed("tool_calls is not an array")),
    };
    Ok(Completion {
        id: str_field(&value, "id"),
        model: str_field(&value, "model"),
        provider_name: str_field(&value, "provider"),
        text,
        tool_calls,
        turn_fields: turn_fields(message),
        finish_reason,
        usage: usage(&value),
        cost_usd: cost(&value),
        ..Completion::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_in_band_message_of_megabytes_is_kept_as_8_kb() {
        let huge = "quota ".repeat(7 * 1024 * 1024 / 6);
        for error in [json!({ "code": 429, "message": huge }), json!(huge)] {
            let read = in_band_error(&error);
            assert!(read.message.len() <= crate::text::MAX_ERROR_BYTES);
            assert!(read.message.starts_with("quota quota"));
            assert_eq!(read.code.is_some(), error.is_object());
        }
    }

    #[test]
    fn request_uses_the_nested_openai_shape() {
        let request = ChatRequest {
            model: "m:free".into(),
            messages: vec![
                Message::user("hi"),
                Message::assistant(
                    None,
                    vec![ToolCall {
                        id: "call_1".into(),
                        name: "f".into(),
                        arguments: "{}".into(),
                        extra_content: None,
                    }],
                ),
                Message::tool_result("call_1", "ok"),
            ],
            tools: vec![ToolSpec {
                name: "f".into(),
                description: "does f".into(),
                parameters: json!({"type": "object"}),
                approval: Default::default(),
            }],
            stream: true,
            max_tokens: Some(512),
            ask_cost: false,
        };
        let body: Value = serde_json::from_slice(&request_body(&request).unwrap()).unwrap();
        assert_eq!(
            body,
            json!({
                "model": "m:free",
                "messages": [
                    {"role": "user", "content": "hi"},
                    {"role": "assistant", "content": null, "tool_calls": [
                        {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
                    ]},
                    {"role": "tool", "content": "ok", "tool_call_id": "call_1"}
                ],
                "tools": [{"type": "function", "function": {
                    "name": "f", "description": "does f", "parameters": {"type": "object"}
                }}],
                "stream": true,
                "max_tokens": 512
            })
        );
    }

    /// The fields a provider returned on a turn go back on that turn, as they came.
    #[test]
    fn turn_fields_and_thought_signatures_go_back_verbatim() {
        let mut turn = Message::assistant(
            None,
            vec![ToolCall {
                id: "call_1".into(),
                name: "f".into(),
                arguments: "{}".into(),
                extra_content: Some(json!({"google": {"thought_signature": "sig"}})),
            }],
        );
        turn.turn_fields.insert(
            "reasoning_details".into(),
            json!([{"type": "reasoning.encrypted", "data": "x"}]),
        );
        let request = ChatRequest {
            model: "m".into(),
            messages: vec![Message::user("hi"), turn],
            tools: vec![],
            stream: false,
            max_tokens: None,
            ask_cost: false,
        };
        let body: Value = serde_json::from_slice(&request_body(&request).unwrap()).unwrap();
        let sent = &body["messages"][1];
        assert_eq!(sent["reasoning_details"][0]["data"], "x");
        assert_eq!(
            sent["tool_calls"][0]["extra_content"]["google"]["thought_signature"],
            "sig"
        );
        assert!(body["messages"][0].get("reasoning_details").is_none());
    }

    #[test]
    fn request_without_tools_omits_the_field() {
        let request = ChatRequest {
            model: "m".into(),
            messages: vec![Message::user("hi")],
            tools: vec![],
            stream: false,
            max_tokens: None,
            ask_cost: false,
        };
        let body: Value = serde_json::from_slice(&request_body(&request).unwrap()).unwrap();
        assert!(body.get("tools").is_none());
        assert!(
            body.get("max_tokens").is_none(),
            "no max_tokens unless the job set one"
        );
        assert_eq!(body["stream"], json!(false));
    }

    #[test]
    fn parses_the_parasail_tool_call_capture() {
        let body = json!({
            "id": "gen-1779334358-5uErgorPN1rJbPw8AVrM", "object": "chat.completion",
            "model": "qwen/qwen3.5-35b-a3b-20260224", "provider": "Parasail",
            "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
                "role": "assistant", "content": null, "reasoning": "…",
                "tool_calls": [{"type": "function", "index": 0, "id": "call_7b",
                    "function": {"name": "search_recipes", "arguments": "{\"query\": \"pad thai\"}"}}]
            }}],
            "usage": {"prompt_tokens": 1077, "completion_tokens": 66, "total_tokens": 1143, "cost": 0.0001}
        });
        let c = completion(body.to_string().as_bytes()).unwrap();
        assert_eq!(c.id.as_deref(), Some("gen-1779334358-5uErgorPN1rJbPw8AVrM"));
        assert_eq!(c.provider_name.as_deref(), Some("Parasail"));
        assert_eq!(c.text, "");
        assert_eq!(c.finish_reason.as_deref(), Some("tool_calls"));
        assert_eq!(
            c.tool_calls,
            vec![ToolCall {
                id: "call_7b".into(),
                name: "search_recipes".into(),
                arguments: "{\"query\": \"pad thai\"}".into(),
                extra_content: None,
            }]
        );
        assert_eq!(
            c.usage,
            Some(Usage {
                prompt_tokens: 1077,
                completion_tokens: 66,
                total_tokens: 1143
            })
        );
    }

    #[test]
    fn bare_error_in_a_200_is_in_band() {
        let body =
            br#"{"error":{"code":"502","message":"Provider returned error"},"user_id":"user_x"}"#;
        let Err(CallError::InBand { error, partial }) = completion(body) else {
            panic!()
        };
        assert_eq!(error.code, Some(502));
        assert_eq!(error.message, "Provider returned error");
        assert_eq!(partial, "");
    }

    #[test]
    fn finish_reason_error_keeps_the_partial_text() {
        let body = json!({"choices": [{"message": {"role": "assistant", "content": "partial output..."},
            "finish_reason": "error",
            "error": {"code": 502, "message": "Provider disconnected mid-stream",
                      "metadata": {"error_type": "provider_unavailable"}}}]});
        let Err(CallError::InBand { error, partial }) = completion(body.to_string().as_bytes())
        else {
            panic!()
        };
        assert_eq!(error.code, Some(502));
        assert_eq!(
            error.error["metadata"]["error_type"],
            "provider_unavailable"
        );
        assert_eq!(partial, "partial output...");
    }

    #[test]
    fn error_codes_may_be_words_or_absent() {
        let e = in_band_error(&json!({"code": "server_error", "message": "boom"}));
        assert_eq!(
            (e.code, e.code_text.as_deref()),
            (None, Some("server_error"))
        );
        let e = in_band_error(
            &json!({"message": "x", "error_type": "rate_limit_exceeded", "http_status": 429}),
        );
        assert_eq!(e.code, Some(429));
        assert!(e.is_rate_limit());
        let e = in_band_error(&json!({"code": null, "message": "x"}));
        assert_eq!((e.code, e.code_text), (None, None));
    }

    #[test]
    fn malformed_bodies_are_classified() {
        for body in [
            &b"not json"[..],
            b"[]",
            b"{}",
            br#"{"choices":{}}"#,
            br#"{"choices":[{"message":{"content":5}}]}"#,
            br#"{"choices":[{"message":{"tool_calls":[{"id":"x","function":{}}]}}]}"#,
        ] {
            assert!(
                matches!(
                    completion(body),
                    Err(CallError::Transport(TransportError::Malformed(_)))
                ),
                "{}",
                String::from_utf8_lossy(body)
            );
        }
    }
}
