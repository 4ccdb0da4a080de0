//! Calling OpenAI-compatible chat completions, with no retries of its own.
//!
//! The chain is the retry (docs/design.md §2.1): this module makes exactly one HTTP call per
//! [`ChatProvider::call`] and reports what happened, success or a [`CallError`] the classifier can
//! read. Streaming answers are reassembled here (text deltas, tool-call fragments, both usage-chunk
//! layouts, in-band errors); text is forwarded to the engine as it arrives so it can publish
//! `delta` events.

mod client;
mod quota;
mod sse;
mod targets;
mod wire;

pub use client::{
    BODY_CAP, CALLS_PER_CONNECTION, ERROR_BODY_CAP, Http2, HttpProvider, ProviderInitError,
    Timeouts, Transport,
};
pub use quota::{DayQuota, QuotaError, parse_day_quota};
pub use targets::{EnvTargets, TargetError, Targets};
pub use wire::is_bare_error;

use crate::chat::{Message, ToolCall, ToolSpec, Usage};
use crate::headers::Headers;
use async_trait::async_trait;
use std::fmt;
use std::sync::Mutex;
use tokio::sync::Notify;

/// A secret that never prints: `Debug` and `Display` show `***`.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(String);

impl ApiKey {
    pub fn new(key: impl Into<String>) -> Self {
        Self(key.into())
    }
    /// The raw key, for the `Authorization` header only.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey(***)")
    }
}

/// Where one call goes: the provider's base URL (`…/api/v1`) and the key to use.
#[derive(Debug, Clone)]
pub struct Target {
    pub base_url: String,
    pub api_key: ApiKey,
}

/// One chat-completions request.
#[derive(Debug, Clone)]
pub struct ChatRequest {
    pub model: String,
    pub messages: Vec<Message>,
    pub tools: Vec<ToolSpec>,
    pub stream: bool,
    /// The most tokens the answer may take, when the job set it.
    pub max_tokens: Option<u32>,
    /// Ask for the call's cost in its usage (`usage: {include: true}`, OpenRouter's usage
    /// accounting): a priced route's answer says what it cost (docs/design.md §4.8).
    pub ask_cost: bool,
}

/// A successful call: the assistant's text and/or tool calls.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Completion {
    /// The generation id (`gen-…`) when the provider sent one.
    pub id: Option<String>,
    /// The model that actually answered (it may differ from the requested slug).
    pub model: Option<String>,
    /// The upstream provider's display name (`"OpenAI"`, `"Chutes"`, …).
    pub provider_name: Option<String>,
    pub text: String,
    pub tool_calls: Vec<ToolCall>,
    /// Fields of the turn the provider requires back on the next request
    /// ([`crate::chat::TURN_FIELDS`]).
    pub turn_fields: serde_json::Map<String, serde_json::Value>,
    pub finish_reason: Option<String>,
    pub usage: Option<Usage>,
    /// What the call cost in USD, when the provider said (`usage.cost`).
    pub cost_usd: Option<f64>,
    /// `X-RateLimit-Remaining` or `x-ratelimit-remaining-requests`, when present.
    pub ratelimit_remaining: Option<i64>,
    /// Ms until the request allowance refills, when the headers say
    /// ([`crate::classify::headroom_reset_ms`]).
    pub ratelimit_reset_ms: Option<u64>,
    /// The answer's rate-limit headers (`x-ratelimit-*`, `retry-after*`), for the limiter to
    /// learn what the provider states ([`crate::pace::Stated`]).
    pub limit_headers: Headers,
}

/// Why a transport-level failure happened. All of these classify as `server` (docs/design.md §3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TransportError {
    Connect(String),
    /// No response headers within the connect + first-byte timeout.
    FirstByteTimeout,
    /// No chunk within the idle timeout while streaming.
    IdleTimeout,
    /// The whole call took longer than its limit.
    TotalTimeout,
    /// The response could not be read as a chat completion (bad JSON, wrong content type, …).
    Malformed(String),
    /// The body grew past the size limit.
    TooLarge,
    /// The stream ended before `[DONE]` or a finish reason.
    Truncated,
    /// The run's deadline came before the answer: freeway cut the call (the provider did
    /// nothing wrong, so nothing rests for it).
    Deadline,
    Other(String),
}

impl fmt::Display for TransportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TransportError::Connect(e) => write!(f, "connect: {e}"),
            TransportError::FirstByteTimeout => f.write_str("timeout waiting for the first byte"),
            TransportError::IdleTimeout => f.write_str("timeout between stream chunks"),
            TransportError::TotalTimeout => f.write_str("the call took longer than its limit"),
            TransportError::Malformed(e) => write!(f, "malformed response: {e}"),
            TransportError::TooLarge => f.write_str("response body too large"),
            TransportError::Deadline => f.write_str("cut at the run's deadline"),
            TransportError::Truncated => f.write_str("stream ended before it finished"),
            TransportError::Other(e) => write!(f, "{e}"),
        }
    }
}

/// An error carried inside a 200 response (mid-stream, or a non-streaming body with `error`).
#[derive(Debug, Clone, PartialEq)]
pub struct InBandError {
    /// `error.code` as a number when it is one (or a numeric string).
    pub code: Option<u16>,
    /// `error.code` when it is a non-numeric string (`"server_error"`, `"rate_limit_exceeded"`).
    pub code_text: Option<String>,
    pub message: String,
    /// The whole `error` object, for the attempt log.
    pub error: serde_json::Value,
}

impl InBandError {
    /// The HTTP status this error stands for (docs/design.md §2.3): `error.code` when numeric,
    /// else its string code mapped (a throttling or quota code 429, credits 402, moderation
    /// 403), else 502.
    pub fn carried_status(&self) -> u16 {
        if let Some(code) = self.code.filter(|c| (400..600).contains(c)) {
            return code;
        }
        let is = |needles: &[&str]| self.words().any(|w| needles.iter().any(|n| w.contains(n)));
        if self.is_rate_limit() {
            429
        } else if is(&["insufficient_quota", "credit", "billing"]) {
            402
        } else if is(&["content_filter", "moderation"]) {
            403
        } else {
            502
        }
    }

    /// A rate-limit error inside a 200 (docs/design.md §2.3: the run ends `interrupted`): a 429,
    /// or a code or type that says throttling or a quota (`rate_limit_exceeded`,
    /// DashScope's `Throttling.RateQuota`, Gemini's `RESOURCE_EXHAUSTED`), but not a quota that
    /// needs paying (`insufficient_quota`).
    pub fn is_rate_limit(&self) -> bool {
        self.code == Some(429)
            || self.words().any(|w| {
                ["rate_limit", "ratelimit", "throttl", "resource_exhausted"]
                    .iter()
                    .any(|n| w.contains(n))
                    || (w.contains("quota") && !w.contains("insufficient"))
            })
    }

    /// The error's string code, `type` and `metadata.error_type`, lowercased.
    fn words(&self) -> impl Iterator<Item = String> + '_ {
        let field = |pointer: &str| self.error.pointer(pointer).and_then(|v| v.as_str());
        [
            self.code_text.as_deref(),
            field("/type"),
            field("/metadata/error_type"),
        ]
        .into_iter()
        .flatten()
        .map(str::to_ascii_lowercase)
    }
}

/// A failed call, as the classifier and the engine need it.
#[derive(Debug, Clone, PartialEq)]
pub enum CallError {
    /// A non-2xx answer before any stream started.
    Http {
        status: u16,
        headers: Headers,
        body: bytes::Bytes,
    },
    /// An error inside a 200 response. `partial` is the text received before it.
    InBand { error: InBandError, partial: String },
    /// The call did not produce a readable answer.
    Transport(TransportError),
}

/// The most of a provider's error body an attempt keeps: enough for its message and metadata.
pub const MAX_ERROR_BODY: usize = 2_048;

impl CallError {
    /// What the attempt log keeps of the failure: [`Display`](fmt::Display), and for an HTTP
    /// error the provider's body (its words say more than the status), its whitespace folded,
    /// cut to [`MAX_ERROR_BODY`], and `key` wherever it is echoed replaced by `[key]`.
    pub fn detail(&self, key: &ApiKey) -> String {
        let CallError::Http { body, .. } = self else {
            return self.to_string();
        };
        let text = String::from_utf8_lossy(body);
        let folded = text.split_whitespace().collect::<Vec<_>>().join(" ");
        if folded.is_empty() {
            return self.to_string();
        }
        let secret = key.expose();
        let folded = match secret.is_empty() {
            true => folded,
            false => folded.replace(secret, "[key]"),
        };
        format!("{self}: {}", crate::text::cut(&folded, MAX_ERROR_BODY))
    }
}

impl fmt::Display for CallError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CallError::Http { status, .. } => write!(f, "HTTP {status}"),
            CallError::InBand { error, .. } => write!(f, "in-band error: {}", error.message),
            CallError::Transport(e) => write!(f, "{e}"),
        }
    }
}

/// One HTTP call to a chat-completions endpoint. Implementations never retry.
#[async_trait]
pub trait ChatProvider: Send + Sync {
    /// Make the call. Text deltas go to `deltas` as they arrive (streaming only).
    async fn call(
        &self,
        target: &Target,
        request: &ChatRequest,
        deltas: &Deltas,
    ) -> Result<Completion, CallError>;
}

/// The text a streamed call has received and its run has not relayed yet. The call pushes
/// pieces as they arrive; the run takes all that waits at once, so a stream that outpaces the
/// event stream goes out in fewer, larger `delta` events instead of a Redis round trip per token,
/// while a slow stream still goes out piece by piece. It lives in the call's future and both
/// sides borrow it: a call allocates nothing for it until text arrives (a channel was a block of
/// slots per call, 700 bytes at each of thousands of calls in flight).
#[derive(Debug, Default)]
pub struct Deltas {
    text: Mutex<String>,
    arrived: Notify,
}

impl Deltas {
    /// Add a piece of text (the call's side).
    pub fn push(&self, piece: &str) {
        if piece.is_empty() {
            return;
        }
        self.text
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push_str(piece);
        self.arrived.notify_one();
    }

    /// All the text pushed since the last take, once there is some (the run's side).
    pub async fn next(&self) -> String {
        loop {
            if let Some(text) = self.take() {
                return text;
            }
            self.arrived.notified().await;
        }
    }

    /// All the text pushed since the last take, if any was.
    pub fn take(&self) -> Option<String> {
        let mut text = self.text.lock().unwrap_or_else(|e| e.into_inner());
        (!text.is_empty()).then(|| std::mem::take(&mut *text))
    }
}

/// Install the process-wide TLS crypto provider (ring) once; later calls do nothing.
pub fn install_crypto() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::FutureExt;

    /// The run takes what a call pushed, in order, all that waits at once; it waits for a push
    /// when nothing waits.
    #[tokio::test]
    async fn deltas_come_out_in_order_and_all_that_waits_at_once() {
        let deltas = Deltas::default();
        assert_eq!(deltas.take(), None);
        let next = deltas.next();
        tokio::pin!(next);
        assert_eq!((&mut next).now_or_never(), None, "nothing was pushed yet");
        for piece in ["Hel", "", "lo"] {
            deltas.push(piece);
        }
        assert_eq!(next.await, "Hello");
        deltas.push(", world");
        assert_eq!(deltas.take().as_deref(), Some(", world"));
        assert_eq!(deltas.take(), None);
    }

    /// An HTTP failure keeps the provider's words, folded and cut, and never the key it was
    /// called with, even when the provider echoes it; other failures keep their line.
    #[test]
    fn an_http_failure_keeps_the_providers_words_without_the_key() {
        let key = ApiKey::new("sk-or-v1-secret-key-123");
        let body = format!(
            "{{\"error\": {{\n  \"message\": \"Invalid key {} for model x\",\n  \"code\": 401}}}}",
            key.expose()
        );
        let http = |body: &str| CallError::Http {
            status: 401,
            headers: Headers::default(),
            body: bytes::Bytes::from(body.to_string()),
        };
        let detail = http(&body).detail(&key);
        assert_eq!(
            detail,
            r#"HTTP 401: {"error": { "message": "Invalid key [key] for model x", "code": 401}}"#
        );
        assert_eq!(
            http(" \n ").detail(&key),
            "HTTP 401",
            "an empty body adds nothing"
        );
        let long = http(&"x".repeat(10 * MAX_ERROR_BODY)).detail(&key);
        assert!(
            long.len() <= MAX_ERROR_BODY + "HTTP 401: ".len(),
            "{}",
            long.len()
        );
        let cut = CallError::Transport(TransportError::Deadline);
        assert_eq!(cut.detail(&key), cut.to_string());
    }
}
