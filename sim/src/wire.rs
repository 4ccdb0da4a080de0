//! The exact bodies and headers the simulator sends, after `notes/provider-wire.md`.
//!
//! Clients pattern-match these strings (message texts, `limit_source`, header names), so every
//! literal here is copied from the notes character for character; the section of the notes is
//! cited next to each. Bodies are serialized from structs so fields keep the order of the
//! captures and the hot path avoids building `serde_json::Value` trees.

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::ser::SerializeMap;
use serde::{Serialize, Serializer};
use serde_json::json;

use crate::account::{GROQ_TPM, GroqVerdict, Refusal};
use crate::clock::window_start;
use crate::config::Shape;
use crate::faults::{ErrorCode, FaultKind, FaultSpec};
use crate::ids;
use crate::model::{Reply, ToolCall};

pub(crate) const X_GENERATION_ID: HeaderName = HeaderName::from_static("x-generation-id");
// HTTP/1 header names are case-insensitive and hyper writes them in lowercase; the mixed-case
// spelling clients see in captures survives in the `metadata.headers` echo.
const X_RATELIMIT_LIMIT: HeaderName = HeaderName::from_static("x-ratelimit-limit");
const X_RATELIMIT_REMAINING: HeaderName = HeaderName::from_static("x-ratelimit-remaining");
const X_RATELIMIT_RESET: HeaderName = HeaderName::from_static("x-ratelimit-reset");

/// The identity shared by a completion and all chunks of its stream.
pub(crate) struct Envelope<'a> {
    pub id: &'a str,
    pub created: u64,
    pub model: &'a str,
    pub provider: &'a str,
}

// ---------------------------------------------------------------------------------------------
// Success bodies (notes §1.3, §1.4, §1.5)

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
    tool_calls: Option<Vec<ToolCallOut<'a>>>,
}

/// Field order of the Parasail capture (notes §1.3): `type`, `index`, `id`, `function`.
#[derive(Serialize)]
struct ToolCallOut<'a> {
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

fn to_json<T: Serialize>(value: &T) -> Vec<u8> {
    // Serializing these plain structs into memory cannot fail (no non-string map keys, no
    // fallible Serialize impls); an empty body would surface as a client-side parse error.
    serde_json::to_vec(value).unwrap_or_default()
}

/// A non-streaming `chat.completion` (notes §1.3).
pub(crate) fn completion(env: &Envelope<'_>, reply: &Reply, usage: &Usage) -> Vec<u8> {
    let (content, tool_calls) = match reply {
        Reply::Text(t) => (Some(t.as_str()), None),
        Reply::Tools(calls) => (
            None,
            Some(
                calls
                    .iter()
                    .enumerate()
                    .map(|(index, c)| ToolCallOut {
                        kind: "function",
                        index,
                        id: &c.id,
                        function: FunctionOut {
                            name: &c.name,
                            arguments: &c.arguments,
                        },
                    })
                    .collect(),
            ),
        ),
    };
    let finish = reply.finish_reason();
    completion_body(env, content, tool_calls, finish, None, usage)
}

/// A non-streaming 200 whose choice ended in error after `partial` (notes §2.5 "Skin-specific").
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
    tool_calls: Option<Vec<ToolCallOut<'_>>>,
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

/// A one-chunk stream padded to exactly `size` bytes (when larger than the bare stream).
pub(crate) fn padded_stream(env: &Envelope<'_>, size: usize) -> Vec<u8> {
    pad_to(size, |pad| {
        let mut out = sse_chunk(env, &[ChunkChoice::text(pad)], None, None).to_vec();
        out.extend_from_slice(DONE);
        out
    })
}

fn pad_to(size: usize, build: impl Fn(&str) -> Vec<u8>) -> Vec<u8> {
    let bare = build("").len();
    // `x` needs no JSON escaping, so each pad byte adds exactly one body byte.
    build(&"x".repeat(size.saturating_sub(bare)))
}

// ---------------------------------------------------------------------------------------------
// Stream chunks (notes §1.4)

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
    tool_calls: Option<[ToolDelta<'a>; 1]>,
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

    fn tool(delta: ToolDelta<'a>) -> ChunkChoice<'a> {
        ChunkChoice::with(
            Delta {
                role: "assistant",
                content: None,
                tool_calls: Some([delta]),
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
    let mut out = Vec::with_capacity(320);
    out.extend_from_slice(b"data: ");
    out.extend_from_slice(&to_json(&Chunk {
        id: env.id,
        object: "chat.completion.chunk",
        created: env.created,
        model: env.model,
        provider: env.provider,
        error,
        choices,
        usage,
    }));
    out.extend_from_slice(b"\n\n");
    Bytes::from(out)
}

// ---------------------------------------------------------------------------------------------
// Errors (notes §2)

/// `error.metadata.headers`: the rate-limit headers echoed with their mixed-case names.
#[derive(Debug, Default)]
struct HeaderEcho(Vec<(&'static str, String)>);

impl Serialize for HeaderEcho {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

/// `error.metadata`; keys are written in the order of the §2.3 A and E captures.
#[derive(Debug, Default, Serialize)]
pub(crate) struct Metadata {
    #[serde(skip_serializing_if = "Option::is_none")]
    headers: Option<HeaderEcho>,
    #[serde(skip_serializing_if = "Option::is_none")]
    raw: Option<String>,
    /// `Some(None)` is the explicit `null` of platform errors.
    #[serde(skip_serializing_if = "Option::is_none")]
    provider_name: Option<Option<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    is_byok: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error_type: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    provider_code: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reasons: Option<[&'static str; 1]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    flagged_input: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    model_slug: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    limit_source: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    remedy_hint: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    retry_after_seconds: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    retry_after_seconds_raw: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    previous_errors: Option<serde_json::Value>,
}

impl Metadata {
    fn is_empty(&self) -> bool {
        self.headers.is_none()
            && self.raw.is_none()
            && self.provider_name.is_none()
            && self.is_byok.is_none()
            && self.reason.is_none()
            && self.error_type.is_none()
            && self.provider_code.is_none()
            && self.reasons.is_none()
            && self.flagged_input.is_none()
            && self.model_slug.is_none()
            && self.limit_source.is_none()
            && self.remedy_hint.is_none()
            && self.retry_after_seconds.is_none()
            && self.retry_after_seconds_raw.is_none()
            && self.previous_errors.is_none()
    }
}

/// The `error` object. `code` is absent only in the documented availability error (§2.3 H).
#[derive(Debug, Default, Serialize)]
pub(crate) struct ErrorObj {
    message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    code: Option<ErrorCode>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error_type: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    http_status: Option<u16>,
    #[serde(skip_serializing_if = "Option::is_none")]
    availability: Option<serde_json::Value>,
    #[serde(skip_serializing_if = "Metadata::is_empty")]
    metadata: Metadata,
}

impl ErrorObj {
    fn new(code: u16, message: impl Into<String>) -> ErrorObj {
        ErrorObj {
            message: message.into(),
            code: Some(ErrorCode::Number(code)),
            ..ErrorObj::default()
        }
    }

    fn with(mut self, metadata: Metadata) -> ErrorObj {
        self.metadata = metadata;
        self
    }

    /// Drops what the 2025 bodies did not have yet (notes §0, §2.3 E: "2025 captures have only
    /// `raw` + `provider_name`").
    fn shaped(mut self, shape: Shape) -> ErrorObj {
        if shape == Shape::Y2025 {
            self.metadata.limit_source = None;
            self.metadata.remedy_hint = None;
            self.metadata.is_byok = None;
        }
        self
    }
}

#[derive(Serialize)]
struct ErrorEnvelope<'a> {
    error: &'a ErrorObj,
    #[serde(skip_serializing_if = "Option::is_none")]
    user_id: Option<&'a str>,
}

/// A pre-stream error: status, extra headers and the JSON envelope.
pub(crate) struct ErrorReply {
    status: StatusCode,
    headers: HeaderMap,
    error: ErrorObj,
    user_id: Option<String>,
}

impl ErrorReply {
    fn new(status: u16, error: ErrorObj, user_id: Option<String>) -> ErrorReply {
        ErrorReply {
            status: StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            headers: HeaderMap::new(),
            error,
            user_id,
        }
    }

    /// Sets `Retry-After` to whole seconds, rounding a fractional hint up.
    fn retry_after(mut self, seconds: u64) -> ErrorReply {
        self.headers
            .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        self
    }

    /// Sets the three `X-RateLimit-*` headers and echoes them in `metadata.headers`.
    fn rate_limited(mut self, limit: u32, reset_ms: u64) -> ErrorReply {
        self.headers
            .insert(X_RATELIMIT_LIMIT, HeaderValue::from(limit));
        self.headers
            .insert(X_RATELIMIT_REMAINING, HeaderValue::from_static("0"));
        self.headers
            .insert(X_RATELIMIT_RESET, HeaderValue::from(reset_ms));
        self.error.metadata.headers = Some(HeaderEcho(vec![
            ("X-RateLimit-Limit", limit.to_string()),
            ("X-RateLimit-Remaining", "0".to_owned()),
            ("X-RateLimit-Reset", reset_ms.to_string()),
        ]));
        self
    }

    pub(crate) fn with_headers(mut self, headers: HeaderMap) -> ErrorReply {
        self.headers.extend(headers);
        self
    }
}

impl IntoResponse for ErrorReply {
    fn into_response(self) -> Response {
        let body = to_json(&ErrorEnvelope {
            error: &self.error,
            user_id: self.user_id.as_deref(),
        });
        json_response(self.status, self.headers, body)
    }
}

/// A response with `Content-Type: application/json`.
pub(crate) fn json_response(status: StatusCode, headers: HeaderMap, body: Vec<u8>) -> Response {
    let mut res = (status, Body::from(body)).into_response();
    let h = res.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    h.extend(headers);
    res
}

/// 401 on chat without a bearer key (notes §2.1).
pub(crate) fn no_auth_credentials() -> ErrorReply {
    ErrorReply::new(401, ErrorObj::new(401, "No auth credentials found"), None)
}

/// 401 on `/key` without a bearer key (notes §4.2).
pub(crate) fn missing_auth_header() -> ErrorReply {
    ErrorReply::new(
        401,
        ErrorObj::new(401, "Missing Authentication header"),
        None,
    )
}

/// 400 for a body the simulator cannot serve.
pub(crate) fn invalid_request(message: String, key: &str) -> ErrorReply {
    ErrorReply::new(400, ErrorObj::new(400, message), Some(ids::user_id(key)))
}

/// The platform free-tier 429s (notes §2.3 A, B, C).
pub(crate) fn free_tier_429(refusal: Refusal, shape: Shape, key: &str) -> ErrorReply {
    let (message, limit_source, remedy_hint, limit, reset_ms) = match refusal {
        Refusal::PerMinute { limit, reset_ms } => (
            match shape {
                // The 2026 text really ends in ". " (notes §2.3 A).
                Shape::Y2026 => "Rate limit exceeded: free-models-per-min. ",
                Shape::Y2025 => "Rate limit exceeded: free-models-per-min.",
            },
            "openrouter_free_tier_per_minute",
            "Slow down requests to free models, or retry after the per-minute window resets.",
            limit,
            reset_ms,
        ),
        Refusal::PerDay {
            limit,
            reset_ms,
            high_balance: false,
        } => (
            "Rate limit exceeded: free-models-per-day. Add 10 credits to unlock 1000 free model requests per day",
            "openrouter_free_tier_daily",
            "Wait for the daily reset (see X-RateLimit-Reset), or purchase credits to raise your free-model daily limit.",
            limit,
            reset_ms,
        ),
        // The only capture of C (via a proxy) lacks `provider_name` and `user_id`; they are kept
        // here as in A and B, which OpenRouter itself sent.
        Refusal::PerDay {
            limit,
            reset_ms,
            high_balance: true,
        } => (
            "Rate limit exceeded: free-models-per-day-high-balance. ",
            "openrouter_free_tier_daily",
            "Wait for the daily reset (see X-RateLimit-Reset)",
            limit,
            reset_ms,
        ),
    };
    let error = ErrorObj::new(429, message)
        .with(Metadata {
            provider_name: Some(None),
            limit_source: Some(limit_source),
            remedy_hint: Some(remedy_hint),
            ..Metadata::default()
        })
        .shaped(shape);
    ErrorReply::new(429, error, Some(ids::user_id(key))).rate_limited(limit, reset_ms)
}

/// What an error fault needs to know about the request it strikes.
pub(crate) struct FaultCtx<'a> {
    pub key: &'a str,
    pub model: &'a str,
    pub now_ms: u64,
    pub user_text: &'a str,
    pub max_tokens: Option<u64>,
    pub shape: Shape,
}

const UPSTREAM_REMEDY: &str = "Retry shortly, add your own provider key (https://openrouter.ai/settings/integrations), or route to another provider with provider routing: https://openrouter.ai/docs/features/provider-routing";
const CREDITS_REMEDY: &str = "Add credits at https://openrouter.ai/settings/credits, or lower max_tokens / prompt size to fit your remaining balance.";
const MASKED_500: &str = "Internal Server Error";
const SERVER_ERROR: &str = "The server had an error processing your request";

/// The pre-stream error of an error fault; `None` for faults served as a 200.
pub(crate) fn fault_error(spec: &FaultSpec, ctx: &FaultCtx<'_>) -> Option<ErrorReply> {
    let shape = spec.shape.unwrap_or(ctx.shape);
    let user = Some(ids::user_id(ctx.key));
    let model = ctx.model;
    let status = spec.kind.status();
    let reply = match spec.kind {
        FaultKind::Upstream429 => {
            let mut meta = Metadata {
                raw: Some(format!(
                    "{model} is temporarily rate-limited upstream. Please retry shortly, or add your own key to accumulate your rate limits: https://openrouter.ai/settings/integrations"
                )),
                provider_name: Some(Some(spec.provider().to_owned())),
                is_byok: Some(false),
                limit_source: Some("upstream_provider_shared_pool"),
                remedy_hint: Some(UPSTREAM_REMEDY),
                ..Metadata::default()
            };
            // §2.3 F: a retry hint appears rounded up, raw, and echoed as a header.
            let retry = spec.retry_after_s.map(|raw| {
                let secs = raw.ceil() as u64;
                meta.retry_after_seconds = Some(secs);
                meta.retry_after_seconds_raw = Some(raw);
                meta.headers = Some(HeaderEcho(vec![("Retry-After", secs.to_string())]));
                secs
            });
            let error = ErrorObj::new(status, "Provider returned error")
                .with(meta)
                .shaped(shape);
            let reply = ErrorReply::new(status, error, user);
            match retry {
                Some(secs) => reply.retry_after(secs),
                None => reply,
            }
        }
        FaultKind::HighDemand => {
            let limit = spec.limit.unwrap_or(8);
            let slug = model.strip_suffix(":free").unwrap_or(model);
            let uuid = ids::uuid_for(model);
            let tail = format!(
                "High demand for {model} on OpenRouter - limited to {limit} requests per minute. Please retry shortly."
            );
            // §2.3 D: the 2025 limiter id has a `limit_rpm/` prefix, the Sep-2026 one does not.
            let message = match shape {
                Shape::Y2025 => format!("Rate limit exceeded: limit_rpm/{slug}/{uuid}. {tail}"),
                Shape::Y2026 => format!("Rate limit exceeded: {slug}/{uuid}. {tail}"),
            };
            let error = ErrorObj::new(status, message)
                .with(Metadata {
                    provider_name: Some(None),
                    limit_source: Some("openrouter_shared_capacity"),
                    // The notes quote only the start of this hint.
                    remedy_hint: Some(
                        "Retry shortly, or add your own provider key (https://openrouter.ai/settings/integrations) to use your own rate limits.",
                    ),
                    ..Metadata::default()
                })
                .shaped(shape);
            // A per-minute cap resets on the next whole minute.
            let reset_ms = window_start(ctx.now_ms, 60_000) + 60_000;
            ErrorReply::new(status, error, user).rate_limited(limit, reset_ms)
        }
        FaultKind::Typed429 => ErrorReply::new(
            status,
            ErrorObj::new(status, "Rate limit exceeded").with(Metadata {
                error_type: Some("rate_limit_exceeded"),
                provider_code: Some(
                    spec.provider_code
                        .clone()
                        .unwrap_or_else(|| "rate_limited".to_owned()),
                ),
                ..Metadata::default()
            }),
            user,
        ),
        // The bare OpenAPI example: nothing says where it came from.
        FaultKind::Generic429 => {
            ErrorReply::new(status, ErrorObj::new(status, "Rate limit exceeded"), None)
        }
        FaultKind::Capacity429 => {
            let secs = spec.retry_after_s.unwrap_or(40.0).ceil() as u64;
            // Literal docs example: `error_type` + `http_status` instead of `code` (§2.3 H).
            let error = ErrorObj {
                message: format!(
                    "All providers for {model} are at capacity. Retry after {secs} seconds."
                ),
                code: None,
                error_type: Some("rate_limit_exceeded"),
                http_status: Some(status),
                availability: Some(json!({
                    "code": "capacity_exhausted",
                    "retryable": true,
                    "retry_after": secs,
                    "requested_models": [model],
                    "affected_providers": ["anthropic", "amazon-bedrock", "google-vertex"],
                    "fallback_models": ["anthropic/claude-haiku-4.5"],
                    "docs_url": "https://openrouter.ai/docs/errors#capacity_exhausted"
                })),
                metadata: Metadata {
                    previous_errors: Some(json!([
                        {"provider": "anthropic", "code": "capacity_exhausted", "status": 429},
                        {"provider": "amazon-bedrock", "code": "capacity_exhausted", "status": 429}
                    ])),
                    ..Metadata::default()
                },
            };
            ErrorReply::new(status, error, user).retry_after(secs)
        }
        FaultKind::Credits402 => ErrorReply::new(
            status,
            ErrorObj::new(
                status,
                "Insufficient credits. Add more using https://openrouter.ai/settings/credits",
            )
            .with(Metadata {
                limit_source: Some("openrouter_credits"),
                remedy_hint: Some(CREDITS_REMEDY),
                ..Metadata::default()
            })
            .shaped(shape),
            user,
        ),
        FaultKind::NeverPurchased402 => ErrorReply::new(
            status,
            ErrorObj::new(
                status,
                "Insufficient credits. This account never purchased credits. Make sure your key is on the correct account or org, and if so, purchase more at https://openrouter.ai/settings/credits",
            )
            .with(Metadata {
                limit_source: Some("openrouter_credits"),
                ..Metadata::default()
            })
            .shaped(shape),
            user,
        ),
        FaultKind::CanOnlyAfford402 => {
            let requested = ctx.max_tokens.unwrap_or(65_536);
            let affordable = requested.saturating_sub(1).min(570);
            let message = format!(
                "This request requires more credits, or fewer max_tokens. You requested up to {requested} tokens, but can only afford {affordable}. To increase, visit https://openrouter.ai/settings/credits and add more credits"
            );
            let previous = json!([{"code": status, "message": message}]);
            ErrorReply::new(
                status,
                ErrorObj::new(status, message)
                    .with(Metadata {
                        provider_name: Some(None),
                        limit_source: Some("openrouter_credits"),
                        remedy_hint: Some(CREDITS_REMEDY),
                        previous_errors: Some(previous),
                        ..Metadata::default()
                    })
                    .shaped(shape),
                user,
            )
        }
        FaultKind::InFlight402 => {
            let secs = spec.retry_after_s.unwrap_or(10.0).ceil() as u64;
            ErrorReply::new(
                status,
                ErrorObj::new(
                    status,
                    "This request would exceed your available credits given your current in-flight requests. Retry after in-flight requests settle, or add credits.",
                )
                .with(Metadata {
                    reason: Some("in_flight_budget_exhausted"),
                    limit_source: Some("openrouter_in_flight_budget"),
                    remedy_hint: Some(
                        "Retry after your in-flight requests settle (see the Retry-After header). Adding credits at https://openrouter.ai/settings/credits raises your in-flight budget, up to a capped ceiling.",
                    ),
                    ..Metadata::default()
                })
                .shaped(shape),
                user,
            )
            .retry_after(secs)
        }
        FaultKind::Unauthorized401 => no_auth_credentials(),
        FaultKind::Moderation403 => ErrorReply::new(
            status,
            ErrorObj::new(
                status,
                format!(
                    "{model} requires moderation on {}. Your input was flagged for \"misc\". No credits were charged.",
                    spec.provider()
                ),
            )
            .with(Metadata {
                provider_name: Some(Some(spec.provider().to_owned())),
                reasons: Some(["misc"]),
                flagged_input: Some(flagged_input(ctx.user_text)),
                model_slug: Some(model.to_owned()),
                ..Metadata::default()
            }),
            user,
        ),
        FaultKind::NotFound404 => ErrorReply::new(
            status,
            ErrorObj::new(
                status,
                "No endpoints found matching your data policy (Free model publication). Configure: https://openrouter.ai/settings/privacy",
            ),
            user,
        ),
        FaultKind::BadRequest400 => ErrorReply::new(
            status,
            ErrorObj::new(status, format!("{model} is not a valid model ID")),
            user,
        ),
        // §2.1: the 500 path masks the message and carries no provider_code.
        FaultKind::Server500 => ErrorReply::new(status, ErrorObj::new(status, MASKED_500), user),
        FaultKind::BadGateway502 | FaultKind::Overloaded529 => {
            let (raw, error_type) = if spec.kind == FaultKind::Overloaded529 {
                ("Overloaded", Some("provider_overloaded"))
            } else {
                ("upstream connect error", None)
            };
            ErrorReply::new(
                status,
                ErrorObj::new(status, "Provider returned error")
                    .with(Metadata {
                        raw: Some(raw.to_owned()),
                        provider_name: Some(Some(spec.provider().to_owned())),
                        is_byok: Some(false),
                        error_type,
                        ..Metadata::default()
                    })
                    .shaped(shape),
                user,
            )
        }
        FaultKind::Timeout
        | FaultKind::Stall
        | FaultKind::MidstreamError
        | FaultKind::Truncated
        | FaultKind::MalformedJson
        | FaultKind::WrongContentType
        | FaultKind::UsageLayoutB
        | FaultKind::HugeBody => return None,
    };
    Some(reply)
}

/// `flagged_input` keeps at most 100 characters of the input, cut in the middle: the captured
/// value is 50 characters, `...`, and the last 50 (notes §2.4 403).
fn flagged_input(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    if chars.len() <= 100 {
        return text.to_owned();
    }
    let head: String = chars[..50].iter().collect();
    let tail: String = chars[chars.len() - 50..].iter().collect();
    format!("{head}...{tail}")
}

/// The in-band error of a `midstream_error` fault (notes §2.5).
pub(crate) fn midstream_error(spec: &FaultSpec) -> ErrorObj {
    let code = spec.code.clone().unwrap_or(ErrorCode::Number(502));
    let (message, metadata) = match &code {
        ErrorCode::Number(429) => (
            "Rate limit exceeded",
            Metadata {
                error_type: Some("rate_limit_exceeded"),
                ..Metadata::default()
            },
        ),
        ErrorCode::Number(500) | ErrorCode::Text(_) => (SERVER_ERROR, Metadata::default()),
        ErrorCode::Number(_) => (
            "Provider returned error",
            Metadata {
                raw: Some("upstream connect error".to_owned()),
                provider_name: Some(Some(spec.provider().to_owned())),
                ..Metadata::default()
            },
        ),
    };
    ErrorObj {
        message: message.to_owned(),
        code: Some(code),
        metadata,
        ..ErrorObj::default()
    }
}

/// The body of an `empty_choices` mid-stream error served without streaming: a bare error
/// envelope inside a 200 (notes §2.5, ai-sdk-provider issues #50/#82).
pub(crate) fn error_in_200(error: &ErrorObj, key: &str) -> Vec<u8> {
    let user_id = ids::user_id(key);
    to_json(&ErrorEnvelope {
        error,
        user_id: Some(&user_id),
    })
}

/// `wrong_content_type`: an HTML page where JSON or SSE was expected.
pub(crate) const HTML_PAGE: &str = "<html>\n<head><title>OpenRouter</title></head>\n<body><h1>Service temporarily unavailable</h1><p>Please try again in a few moments.</p></body>\n</html>\n";

// ---------------------------------------------------------------------------------------------
// Groq (notes §5)

/// The six `x-ratelimit-*` headers Groq sends on every response.
pub(crate) fn groq_headers(v: &GroqVerdict) -> HeaderMap {
    let reset = HeaderValue::try_from(go_duration(v.reset_in_ms)).ok();
    let mut h = HeaderMap::with_capacity(7);
    h.insert(
        HeaderName::from_static("x-ratelimit-limit-requests"),
        HeaderValue::from(v.limit_requests),
    );
    h.insert(
        HeaderName::from_static("x-ratelimit-limit-tokens"),
        HeaderValue::from(GROQ_TPM),
    );
    h.insert(
        HeaderName::from_static("x-ratelimit-remaining-requests"),
        HeaderValue::from(v.remaining_requests()),
    );
    h.insert(
        HeaderName::from_static("x-ratelimit-remaining-tokens"),
        HeaderValue::from(v.remaining_tokens),
    );
    if let Some(reset) = reset {
        h.insert(
            HeaderName::from_static("x-ratelimit-reset-requests"),
            reset.clone(),
        );
        h.insert(HeaderName::from_static("x-ratelimit-reset-tokens"), reset);
    }
    h
}

#[derive(Serialize)]
struct GroqError<'a> {
    message: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    code: &'static str,
}

/// Groq's RPM 429 (notes §5) with `retry-after` and the six headers.
pub(crate) fn groq_429(model: &str, key: &str, v: &GroqVerdict) -> Response {
    let message = format!(
        "Rate limit reached for model `{model}` in organization `{}` service tier `on_demand` on requests per minute (RPM): Limit {}, Used {}, Requested 1. Please try again in {}. Need more tokens? Upgrade to Dev Tier today at https://console.groq.com/settings/billing",
        ids::org_id(key),
        v.limit_requests,
        v.used_requests,
        go_duration(v.reset_in_ms),
    );
    let body = to_json(&json!({ "error": GroqError {
        message: &message,
        kind: "requests",
        code: "rate_limit_exceeded",
    }}));
    let mut headers = groq_headers(v);
    headers.insert(
        header::RETRY_AFTER,
        HeaderValue::from(v.reset_in_ms.div_ceil(1000).max(1)),
    );
    json_response(StatusCode::TOO_MANY_REQUESTS, headers, body)
}

/// Go-style duration as Groq writes it: `7.66s`, `2m59.56s`, `1m26.4s`, `20s`, `8h`, `450ms`.
pub(crate) fn go_duration(ms: u64) -> String {
    use std::fmt::Write;
    if ms == 0 {
        return "0s".to_owned();
    }
    if ms < 1000 {
        return format!("{ms}ms");
    }
    let mut out = String::new();
    let (hours, minutes, sec_ms) = (ms / 3_600_000, ms / 60_000 % 60, ms % 60_000);
    if hours > 0 {
        let _ = write!(out, "{hours}h");
    }
    if minutes > 0 {
        let _ = write!(out, "{minutes}m");
    }
    if sec_ms > 0 {
        let (secs, frac) = (sec_ms / 1000, sec_ms % 1000);
        if frac == 0 {
            let _ = write!(out, "{secs}s");
        } else {
            let frac = format!("{frac:03}");
            let _ = write!(out, "{secs}.{}s", frac.trim_end_matches('0'));
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// GET /api/v1/key (notes §4.2)

#[derive(Serialize)]
struct KeyInfo {
    data: KeyData,
}

#[derive(Serialize)]
struct KeyData {
    label: String,
    limit: Option<f64>,
    limit_remaining: Option<f64>,
    limit_reset: Option<&'static str>,
    include_byok_in_limit: bool,
    usage: u32,
    usage_daily: u32,
    usage_weekly: u32,
    usage_monthly: u32,
    byok_usage: u32,
    byok_usage_daily: u32,
    byok_usage_weekly: u32,
    byok_usage_monthly: u32,
    is_free_tier: bool,
    is_management_key: bool,
    is_provisioning_key: bool,
    creator_user_id: Option<String>,
    expires_at: Option<String>,
    free_model_daily_requests: FreeModelDailyRequests,
    rate_limit: DeprecatedRateLimit,
}

#[derive(Serialize)]
struct FreeModelDailyRequests {
    limit: u32,
    remaining: u32,
    used: u32,
}

#[derive(Serialize)]
struct DeprecatedRateLimit {
    requests: i32,
    interval: &'static str,
    note: &'static str,
}

/// The key description, consistent with the free-model counters.
pub(crate) fn key_info(key: &str, used: u32, limit: u32, high_balance: bool) -> Response {
    let body = to_json(&KeyInfo {
        data: KeyData {
            label: mask_key(key),
            limit: None,
            limit_remaining: None,
            limit_reset: None,
            include_byok_in_limit: false,
            usage: 0,
            usage_daily: 0,
            usage_weekly: 0,
            usage_monthly: 0,
            byok_usage: 0,
            byok_usage_daily: 0,
            byok_usage_weekly: 0,
            byok_usage_monthly: 0,
            // "Whether the user has paid for credits before" (notes §4.2).
            is_free_tier: !high_balance,
            is_management_key: false,
            is_provisioning_key: false,
            creator_user_id: None,
            expires_at: None,
            free_model_daily_requests: FreeModelDailyRequests {
                limit,
                remaining: limit.saturating_sub(used),
                used,
            },
            rate_limit: DeprecatedRateLimit {
                requests: -1,
                interval: "10s",
                note: "This field is deprecated and safe to ignore.",
            },
        },
    });
    json_response(StatusCode::OK, HeaderMap::new(), body)
}

/// `sk-or-v1-0e6...1c96`: the first 12 and last 4 characters, as in the captured label (§4.2).
/// Shorter keys show a quarter at each end, so the label never reveals the whole key.
pub(crate) fn mask_key(key: &str) -> String {
    let chars: Vec<char> = key.chars().collect();
    let (head, tail) = if chars.len() >= 24 {
        (12, 4)
    } else {
        (chars.len() / 4, chars.len() / 4)
    };
    let head: String = chars[..head].iter().collect();
    let tail: String = chars[chars.len() - tail..].iter().collect();
    format!("{head}...{tail}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations_match_groq_captures() {
        assert_eq!(go_duration(7_660), "7.66s");
        assert_eq!(go_duration(179_560), "2m59.56s");
        assert_eq!(go_duration(86_400), "1m26.4s");
        assert_eq!(go_duration(20_000), "20s");
        assert_eq!(go_duration(8 * 3_600_000), "8h");
        assert_eq!(go_duration(450), "450ms");
        assert_eq!(go_duration(0), "0s");
    }

    #[test]
    fn keys_are_masked_like_the_captured_label() {
        assert_eq!(
            mask_key("sk-or-v1-0e6f44a47a05f1dad2ad7e88c4c4d6b77688915c778b58a5ed4b3f2fb1c96"),
            "sk-or-v1-0e6...1c96"
        );
        assert_eq!(mask_key("abcdefgh"), "ab...gh");
        assert_eq!(mask_key("abc"), "...");
    }

    #[test]
    fn flagged_input_keeps_100_chars_cut_in_the_middle() {
        let long = "a".repeat(60) + &"b".repeat(60);
        assert_eq!(
            flagged_input(&long),
            format!("{}...{}", "a".repeat(50), "b".repeat(50))
        );
        assert_eq!(flagged_input("short"), "short");
    }
}
