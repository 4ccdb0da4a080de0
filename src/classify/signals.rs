//! What the rules read from one answer, after normalising its shape (docs/design.md §3).
//!
//! Providers wrap the same facts differently: Gemini sends `[{"error":…}]`, its OpenAI-compatible
//! endpoint relays its native error as a JSON string inside `error.message`, Anthropic-style
//! bodies put `type` under `error`, and OpenRouter echoes the upstream's headers in
//! `error.metadata.headers`. The rules must not care which: this module reads every shape into one
//! flat view, so a rule is written once, against the fact, not against a sample.

use super::hints::{self, Hint};
use super::limits::RefusalLimits;
use crate::headers::Headers;
use crate::provider::is_bare_error;
use serde_json::{Map, Value};

/// Everything the rules read from one response. A body that is not JSON carries only its
/// headers.
#[derive(Default)]
pub(super) struct Signals {
    /// Real headers first, then the `error.metadata.headers` echo.
    pub headers: Headers,
    /// `error.message`, lowercased (the inner message when the outer one held JSON).
    pub message: String,
    /// `error.code`, `error.type`, `error.status`, `error.error_type` and `metadata.error_type`
    /// that are strings, lowercased.
    pub kinds: Vec<String>,
    /// `metadata.limit_source` without its `openrouter_` prefix (one capture spells the
    /// per-minute source `free_tier_per_minute`).
    pub limit_source: Option<String>,
    pub provider_marker: bool,
    pub provider_name: Option<String>,
    /// Moderation (`reasons`, `flagged_input`, "requires moderation", `content_filter`) or a
    /// guardrail (`patterns`).
    pub content_block: bool,
    /// A Google error detail names a per-day quota (`quotaId` with `PerDay`).
    pub day_quota_id: bool,
    /// A Google `QuotaFailure` detail: a `RESOURCE_EXHAUSTED` that is the key's quota, not the
    /// model's capacity.
    pub quota_failure: bool,
    /// The first retry hint present, in the order of docs/design.md §3.2.
    pub hint: Option<Hint>,
    /// The limits the body states, per dimension.
    pub stated: RefusalLimits,
    /// The moment the message says access comes back ("You will regain access on 2026-04-01 at
    /// 00:00 UTC"), epoch ms: a spend limit's end.
    pub regain_at_ms: Option<u64>,
}

impl Signals {
    pub(super) fn read(headers: &Headers, body: &[u8], now_ms: u64) -> Signals {
        let mut s = Signals {
            headers: headers.clone(),
            ..Signals::default()
        };
        let error = envelope(body);
        if let Some(error) = &error {
            s.read_error(error);
        }
        // Retry hints also live in the error's `details` (Google's `RetryInfo`) and `metadata`
        // (`retry_after_seconds`).
        let (details, metadata) = match &error {
            Some(error) => (
                google_details(error).cloned().collect(),
                error.get("metadata").cloned(),
            ),
            None => (Vec::new(), None),
        };
        s.hint = hints::first(&s.headers, (details, metadata), &s.message, now_ms);
        s.regain_at_ms = hints::regain_at_ms(&s.message);
        s
    }

    fn read_error(&mut self, error: &Map<String, Value>) {
        let empty = Map::new();
        let metadata = error
            .get("metadata")
            .and_then(Value::as_object)
            .unwrap_or(&empty);
        if let Some(echo) = metadata.get("headers").and_then(Value::as_object) {
            for (name, value) in echo {
                match value {
                    Value::String(v) => self.headers.push(name.as_str(), v.as_str()),
                    Value::Number(n) => self.headers.push(name.as_str(), n.to_string()),
                    _ => {}
                }
            }
        }
        self.message = error
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_ascii_lowercase();
        let text = |v: Option<&Value>| v.and_then(Value::as_str).map(str::to_ascii_lowercase);
        self.kinds = [
            error.get("code"),
            error.get("type"),
            error.get("status"),
            error.get("error_type"),
            metadata.get("error_type"),
            // OpenRouter's model-availability errors name the cause here (`capacity_exhausted`).
            error.get("availability").and_then(|a| a.get("code")),
        ]
        .into_iter()
        .filter_map(text)
        // Google names the cause in an `ErrorInfo` detail's `reason` (`MODEL_CAPACITY_EXHAUSTED`)
        // while `status` stays `RESOURCE_EXHAUSTED`, as for a spent quota.
        .chain(google_details(error).filter_map(|d| text(d.get("reason"))))
        .collect();
        self.limit_source = text(metadata.get("limit_source")).map(|v| {
            v.strip_prefix("openrouter_")
                .map_or(v.clone(), str::to_string)
        });
        let present = |key: &str| metadata.get(key).is_some_and(|v| !v.is_null());
        self.provider_marker =
            present("provider_name") || present("raw") || present("provider_code");
        self.provider_name = metadata
            .get("provider_name")
            .and_then(Value::as_str)
            .map(str::to_string);
        self.content_block = present("reasons")
            || present("flagged_input")
            || present("patterns")
            || self.message.contains("requires moderation")
            || self.kinds.iter().any(|k| k == "content_filter");
        self.quota_failure = google_details(error).any(|detail| {
            detail
                .get("@type")
                .and_then(Value::as_str)
                .is_some_and(|t| t.ends_with("google.rpc.QuotaFailure"))
        });
        let details: Vec<&Value> = google_details(error).collect();
        self.stated =
            RefusalLimits::from_message(&self.message).or(RefusalLimits::from_google(&details));
        self.day_quota_id = google_details(error).any(|detail| {
            let violations = detail.get("violations").and_then(Value::as_array);
            violations.into_iter().flatten().any(|v| {
                v.get("quotaId")
                    .and_then(Value::as_str)
                    .is_some_and(|id| id.contains("PerDay"))
            })
        });
    }

    /// Whether any of the error's code, type or status is `kind` (lowercase).
    pub(super) fn kind_is(&self, kind: &str) -> bool {
        self.kinds.iter().any(|k| k == kind)
    }

    /// Whether the message contains any of `needles` (lowercase).
    pub(super) fn says(&self, needles: &[&str]) -> bool {
        needles.iter().any(|n| self.message.contains(n))
    }

    /// `X-RateLimit-Remaining` or `x-ratelimit-remaining-requests`.
    pub(super) fn ratelimit_remaining(&self) -> Option<i64> {
        let parse = |name: &str| {
            self.headers
                .get(name)
                .and_then(|v| v.trim().parse::<i64>().ok())
        };
        parse("x-ratelimit-remaining").or_else(|| parse("x-ratelimit-remaining-requests"))
    }
}

/// The error object of a body, normalised: the first element of a JSON array, a string `error`
/// as its message, a body that is itself the error (a top-level `code` or `message` and no
/// `choices`: Mistral's `{"object":"error",…}`, DashScope's `{"code":"Throttling.…",…}`), and an
/// `error.message` that is itself a JSON error merged in (its fields win, as the inner error is
/// the provider's own).
fn envelope(body: &[u8]) -> Option<Map<String, Value>> {
    let root = serde_json::from_slice::<Value>(body).ok()?;
    let root = match root {
        Value::Array(mut items) if !items.is_empty() => items.swap_remove(0),
        other => other,
    };
    let mut error = match root.get("error") {
        Some(Value::Object(error)) => error.clone(),
        Some(Value::String(message)) => {
            Map::from_iter([("message".to_string(), Value::String(message.clone()))])
        }
        None if is_bare_error(&root) => root.as_object()?.clone(),
        _ => return None,
    };
    let inner = error
        .get("message")
        .and_then(Value::as_str)
        .and_then(|m| serde_json::from_str::<Value>(m.trim()).ok());
    if let Some(inner) = inner {
        let inner = match inner {
            Value::Array(mut items) if !items.is_empty() => items.swap_remove(0),
            other => other,
        };
        if let Some(Value::Object(fields)) = inner.get("error") {
            for (k, v) in fields {
                error.insert(k.clone(), v.clone());
            }
        }
    }
    Some(error)
}

/// Google's `error.details` entries.
fn google_details(error: &Map<String, Value>) -> impl Iterator<Item = &Value> {
    error
        .get("details")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}
