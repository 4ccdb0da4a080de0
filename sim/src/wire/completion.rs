//! Success bodies: the non-streaming `chat.completion` and the `usage` object every success
//! carries, streamed or not (docs/providers.md §1.2, §1.4).
//!
//! `usage` is the one part a client bills by, so `cost` is written the way the captures write
//! it (`0` for `:free`, never `0.0`), and only where OpenRouter shows it (see [`Usage`]). Padding
//! lives here too: a body of an exact size tests client body limits with JSON that still parses.

use serde::{Serialize, Serializer};

use super::error::ErrorObj;
use super::{Envelope, to_json};
use crate::model::{CallStyle, Reply, ToolCall};
use crate::price::Cost;

#[derive(Clone, Debug, Serialize)]
pub(crate) struct Usage {
    prompt_tokens: u64,
    completion_tokens: u64,
    total_tokens: u64,
    /// What the answer cost in credits (USD). OpenRouter's Usage Accounting
    /// (openrouter.ai/docs/use-cases/usage-accounting; OpenRouterTeam/docs
    /// `cookbook/administration/usage-accounting.mdx`) returns it in `usage` for a request with
    /// `"usage": {"include": true}`, in the non-streamed body and in the last chunk of a stream;
    /// the docs now say every answer carries it. Absent when not shown.
    #[serde(skip_serializing_if = "Option::is_none")]
    cost: Option<Credits>,
    is_byok: bool,
    prompt_tokens_details: PromptTokensDetails,
    #[serde(skip_serializing_if = "Option::is_none")]
    cost_details: Option<CostDetails>,
    completion_tokens_details: CompletionTokensDetails,
}

#[derive(Clone, Debug, Serialize)]
struct PromptTokensDetails {
    cached_tokens: u64,
    cache_write_tokens: u64,
    audio_tokens: u64,
}

#[derive(Clone, Debug, Serialize)]
struct CostDetails {
    upstream_inference_cost: Credits,
    upstream_inference_prompt_cost: Credits,
    upstream_inference_completions_cost: Credits,
}

#[derive(Clone, Debug, Serialize)]
struct CompletionTokensDetails {
    reasoning_tokens: u64,
}

/// An amount of credits (USD), written `0` when zero, as the captures of `:free` calls show,
/// not `0.0`.
#[derive(Clone, Copy, Debug)]
struct Credits(f64);

impl Serialize for Credits {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if self.0 == 0.0 {
            s.serialize_u64(0)
        } else {
            s.serialize_f64(self.0)
        }
    }
}

impl Usage {
    /// The usage of an answer; `cost` is what it cost, when the answer shows it.
    pub(crate) fn new(prompt_tokens: u64, completion_tokens: u64, cost: Option<Cost>) -> Usage {
        Usage {
            prompt_tokens,
            completion_tokens,
            total_tokens: prompt_tokens + completion_tokens,
            cost: cost.map(|c| Credits(c.total())),
            is_byok: false,
            prompt_tokens_details: PromptTokensDetails {
                cached_tokens: 0,
                cache_write_tokens: 0,
                audio_tokens: 0,
            },
            cost_details: cost.map(|c| CostDetails {
                upstream_inference_cost: Credits(c.total()),
                upstream_inference_prompt_cost: Credits(c.prompt),
                upstream_inference_completions_cost: Credits(c.completion),
            }),
            completion_tokens_details: CompletionTokensDetails {
                reasoning_tokens: 0,
            },
        }
    }
}

#[derive(Serialize)]
struct Completion<'a> {
    id: &'a str,
    object: &'static str,
    created: u64,
    model: &'a str,
    provider: &'a str,
    choices: [CompletionChoice<'a>; 1],
    usage: &'a Usage,
}

#[derive(Serialize)]
struct CompletionChoice<'a> {
    index: u32,
    logprobs: (),
    finish_reason: &'a str,
    native_finish_reason: &'a str,
    message: AssistantMessage<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a ErrorObj>,
}

#[derive(Serialize)]
struct AssistantMessage<'a> {
    role: &'static str,
    content: Option<&'a str>,
    refusal: (),
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_calls: Option<Vec<CallOut<'a>>>,
}

/// A tool call as one provider or the other writes it.
#[derive(Serialize)]
#[serde(untagged)]
pub(crate) enum CallOut<'a> {
    OpenAi(ToolCallOut<'a>),
    Gemini(GeminiCall<'a>),
}

/// A whole call the Gemini way (docs/providers.md §5.2), in the captured field order: no
/// `index`, the thought signature in `extra_content` when the call carries one.
#[derive(Serialize)]
pub(crate) struct GeminiCall<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    extra_content: Option<ExtraContent<'a>>,
    function: GeminiFunction<'a>,
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
}

#[derive(Serialize)]
struct ExtraContent<'a> {
    google: GoogleExtra<'a>,
}

#[derive(Serialize)]
struct GoogleExtra<'a> {
    thought_signature: &'a str,
}

#[derive(Serialize)]
struct GeminiFunction<'a> {
    arguments: &'a str,
    name: &'a str,
}

impl<'a> GeminiCall<'a> {
    pub(crate) fn of(call: &'a ToolCall) -> GeminiCall<'a> {
        GeminiCall {
            extra_content: call.thought_signature.as_deref().map(|sig| ExtraContent {
                google: GoogleExtra {
                    thought_signature: sig,
                },
            }),
            function: GeminiFunction {
                arguments: &call.arguments,
                name: &call.name,
            },
            id: &call.id,
            kind: "function",
        }
    }
}

/// Field order of the Parasail capture (docs/providers.md §1.2): `type`, `index`, `id`, `function`.
#[derive(Serialize)]
pub(crate) struct ToolCallOut<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    index: usize,
    id: &'a str,
    function: FunctionOut<'a>,
}

#[derive(Serialize)]
struct FunctionOut<'a> {
    name: &'a str,
    arguments: &'a str,
}

/// A non-streaming `chat.completion` (docs/providers.md §1.2), its tool calls in `style`.
pub(crate) fn completion(
    env: &Envelope<'_>,
    reply: &Reply,
    style: CallStyle,
    usage: &Usage,
) -> Vec<u8> {
    let (content, tool_calls) = match reply {
        Reply::Text(t) => (Some(t.as_str()), None),
        Reply::Tools(calls) => (
            None,
            Some(
                calls
                    .iter()
                    .enumerate()
                    .map(|(index, c)| match style {
                        CallStyle::Gemini => CallOut::Gemini(GeminiCall::of(c)),
                        CallStyle::Deltas => CallOut::OpenAi(ToolCallOut {
                            kind: "function",
                            index,
                            id: &c.id,
                            function: FunctionOut {
                                name: &c.name,
                                arguments: &c.arguments,
                            },
                        }),
                    })
                    .collect(),
            ),
        ),
    };
    let finish = reply.finish_reason();
    completion_body(env, content, tool_calls, finish, None, usage)
}

/// A non-streaming 200 whose choice ended in error after `partial` (docs/providers.md §2.8).
pub(crate) fn completion_with_error(
    env: &Envelope<'_>,
    partial: &str,
    error: &ErrorObj,
    usage: &Usage,
) -> Vec<u8> {
    completion_body(env, Some(partial), None, "error", Some(error), usage)
}

fn completion_body(
    env: &Envelope<'_>,
    content: Option<&str>,
    tool_calls: Option<Vec<CallOut<'_>>>,
    finish: &str,
    error: Option<&ErrorObj>,
    usage: &Usage,
) -> Vec<u8> {
    to_json(&Completion {
        id: env.id,
        object: "chat.completion",
        created: env.created,
        model: env.model,
        provider: env.provider,
        choices: [CompletionChoice {
            index: 0,
            logprobs: (),
            finish_reason: finish,
            native_finish_reason: finish,
            message: AssistantMessage {
                role: "assistant",
                content,
                refusal: (),
                tool_calls,
            },
            error,
        }],
        usage,
    })
}

/// A completion padded (inside its content string) to exactly `size` bytes when `size` exceeds
/// the unpadded body, to exercise client body-size limits with otherwise valid JSON.
pub(crate) fn padded_completion(env: &Envelope<'_>, usage: &Usage, size: usize) -> Vec<u8> {
    pad_to(size, |pad| {
        completion_body(env, Some(pad), None, "stop", None, usage)
    })
}

/// Builds the body around a pad of `x`s sized so the whole body is `size` bytes (or the bare body
/// when that is already larger).
pub(super) fn pad_to(size: usize, build: impl Fn(&str) -> Vec<u8>) -> Vec<u8> {
    let bare = build("").len();
    // `x` needs no JSON escaping, so each pad byte adds exactly one body byte.
    build(&"x".repeat(size.saturating_sub(bare)))
}
