//! Success bodies: the non-streaming `chat.completion` and the `usage` object every success
//! carries, streamed or not (docs/providers.md §1.2, §1.4).
//!
//! `usage` is the one part a client bills by, so `cost` is written the way the captures write
//! it (`0` for `:free`, never `0.0`). Padding lives here too: a body of an exact size tests
//! client body limits with JSON that still parses.

use serde::{Serialize, Serializer};

use super::error::ErrorObj;
use super::{Envelope, to_json};
use crate::model::{CallStyle, Reply, ToolCall};

/// Paid-model prices in credits per token; any positive value shows that `cost` is non-zero
/// for paid models while `:free` reports 0.
const PROMPT_PRICE: f64 = 1e-7;
const COMPLETION_PRICE: f64 = 4e-7;

#[derive(Clone, Debug, Serialize)]
pub(crate) struct Usage {
    prompt_tokens: u64,
    completion_tokens: u64,
    total_tokens: u64,
    #[serde(serialize_with = "credits")]
    cost: f64,
    is_byok: bool,
    prompt_tokens_details: PromptTokensDetails,
    cost_details: CostDetails,
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
    #[serde(serialize_with = "credits")]
    upstream_inference_cost: f64,
    #[serde(serialize_with = "credits")]
    upstream_inference_prompt_cost: f64,
    #[serde(serialize_with = "credits")]
    upstream_inference_completions_cost: f64,
}

#[derive(Clone, Debug, Serialize)]
struct CompletionTokensDetails {
    reasoning_tokens: u64,
}

/// Writes a zero cost as `0`, as the captures of `:free` calls show, not `0.0`.
fn credits<S: Serializer>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
    if *v == 0.0 {
        s.serialize_u64(0)
    } else {
        s.serialize_f64(*v)
    }
}

impl Usage {
    pub(crate) fn new(prompt_tokens: u64, completion_tokens: u64, free: bool) -> Usage {
        let (prompt_cost, completion_cost) = if free {
            (0.0, 0.0)
        } else {
            (
                prompt_tokens as f64 * PROMPT_PRICE,
                completion_tokens as f64 * COMPLETION_PRICE,
            )
        };
        Usage {
            prompt_tokens,
            completion_tokens,
            total_tokens: prompt_tokens + completion_tokens,
            cost: prompt_cost + completion_cost,
            is_byok: false,
            prompt_tokens_details: PromptTokensDetails {
                cached_tokens: 0,
                cache_write_tokens: 0,
                audio_tokens: 0,
            },
            cost_details: CostDetails {
                upstream_inference_cost: prompt_cost + completion_cost,
                upstream_inference_prompt_cost: prompt_cost,
                upstream_inference_completions_cost: completion_cost,
            },
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

/// Field order of the Parasail capture (§1.2): `type`, `index`, `id`, `function`.
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
