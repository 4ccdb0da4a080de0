//! Stream chunks: the SSE events of a streamed reply (docs/providers.md §1.3).
//!
//! `crate::stream` decides what a stream says and when; this file only writes each event, so the
//! framing (`data: <json>` and a blank line) and the field order of a chunk live in one place.
//! Tool-call deltas follow the OpenAI delta protocol the captures show: the first delta of a call
//! carries `id`, `type` and `function.name`, the later ones only `index` and an arguments piece.

use axum::body::Bytes;
use serde::Serialize;

use super::completion::{GeminiCall, Usage, pad_to};
use super::error::ErrorObj;
use super::{Envelope, data_frame, to_json};
use crate::model::ToolCall;

/// The comment OpenRouter sends while waiting for the first token.
pub(crate) const KEEPALIVE: &[u8] = b": OPENROUTER PROCESSING\n\n";
pub(crate) const DONE: &[u8] = b"data: [DONE]\n\n";
/// The broken event of the `malformed_json` fault.
pub(crate) const MALFORMED_EVENT: &[u8] = b"data: {\"id\":\n\n";

#[derive(Serialize)]
struct Chunk<'a> {
    id: &'a str,
    object: &'static str,
    created: u64,
    model: &'a str,
    provider: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a ErrorObj>,
    choices: &'a [ChunkChoice<'a>],
    #[serde(skip_serializing_if = "Option::is_none")]
    usage: Option<&'a Usage>,
}

#[derive(Serialize)]
pub(crate) struct ChunkChoice<'a> {
    index: u32,
    delta: Delta<'a>,
    finish_reason: Option<&'static str>,
    native_finish_reason: Option<&'static str>,
}

#[derive(Serialize)]
struct Delta<'a> {
    role: &'static str,
    content: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_calls: Option<[CallDelta<'a>; 1]>,
}

/// One piece of a streamed call: an OpenAI delta, or a Gemini call sent whole.
#[derive(Serialize)]
#[serde(untagged)]
enum CallDelta<'a> {
    OpenAi(ToolDelta<'a>),
    Gemini(GeminiCall<'a>),
}

#[derive(Serialize)]
struct ToolDelta<'a> {
    index: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<&'a str>,
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    kind: Option<&'static str>,
    function: FunctionDelta<'a>,
}

#[derive(Serialize)]
struct FunctionDelta<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<&'a str>,
    arguments: &'a str,
}

impl<'a> ChunkChoice<'a> {
    fn with(delta: Delta<'a>, finish: Option<&'static str>) -> ChunkChoice<'a> {
        ChunkChoice {
            index: 0,
            delta,
            finish_reason: finish,
            native_finish_reason: finish,
        }
    }

    /// A content delta (the first chunk of every stream is `text("")`).
    pub(crate) fn text(content: &'a str) -> ChunkChoice<'a> {
        ChunkChoice::with(
            Delta {
                role: "assistant",
                content: Some(content),
                tool_calls: None,
            },
            None,
        )
    }

    /// The first delta of a tool call: `id`, `type`, `function.name`, empty arguments.
    pub(crate) fn tool_start(index: usize, call: &'a ToolCall) -> ChunkChoice<'a> {
        ChunkChoice::tool(ToolDelta {
            index,
            id: Some(&call.id),
            kind: Some("function"),
            function: FunctionDelta {
                name: Some(&call.name),
                arguments: "",
            },
        })
    }

    /// A later delta of a tool call: only `index` and an arguments fragment.
    pub(crate) fn tool_args(index: usize, fragment: &'a str) -> ChunkChoice<'a> {
        ChunkChoice::tool(ToolDelta {
            index,
            id: None,
            kind: None,
            function: FunctionDelta {
                name: None,
                arguments: fragment,
            },
        })
    }

    /// A whole call in one chunk, without `index` (Gemini, docs/providers.md §5.2).
    pub(crate) fn whole_call(call: &'a ToolCall) -> ChunkChoice<'a> {
        ChunkChoice::with(
            Delta {
                role: "assistant",
                content: None,
                tool_calls: Some([CallDelta::Gemini(GeminiCall::of(call))]),
            },
            None,
        )
    }

    fn tool(delta: ToolDelta<'a>) -> ChunkChoice<'a> {
        ChunkChoice::with(
            Delta {
                role: "assistant",
                content: None,
                tool_calls: Some([CallDelta::OpenAi(delta)]),
            },
            None,
        )
    }

    /// The final choice chunk: empty content and the finish reason.
    pub(crate) fn finish(reason: &'static str) -> ChunkChoice<'a> {
        ChunkChoice::with(
            Delta {
                role: "assistant",
                content: Some(""),
                tool_calls: None,
            },
            Some(reason),
        )
    }
}

/// One SSE event `data: <chunk>\n\n`.
pub(crate) fn sse_chunk(
    env: &Envelope<'_>,
    choices: &[ChunkChoice<'_>],
    usage: Option<&Usage>,
    error: Option<&ErrorObj>,
) -> Bytes {
    data_frame(&to_json(&Chunk {
        id: env.id,
        object: "chat.completion.chunk",
        created: env.created,
        model: env.model,
        provider: env.provider,
        error,
        choices,
        usage,
    }))
}

/// A one-chunk stream padded to exactly `size` bytes (when larger than the bare stream).
pub(crate) fn padded_stream(env: &Envelope<'_>, size: usize) -> Vec<u8> {
    pad_to(size, |pad| {
        let mut out = sse_chunk(env, &[ChunkChoice::text(pad)], None, None).to_vec();
        out.extend_from_slice(DONE);
        out
    })
}
