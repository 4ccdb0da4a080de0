//! Groq's wire shapes: the six `x-ratelimit-*` headers on every response and its 429
//! (docs/providers.md §4).
//!
//! Groq describes limits per model and writes waits as Go durations (`2m59.56s`), unlike
//! OpenRouter's epoch-millisecond resets; keeping its shapes in one file keeps the two dialects
//! from borrowing each other's formats.

use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::response::Response;
use serde::Serialize;
use serde_json::json;

use super::{json_response, to_json};
use crate::account::{GROQ_TPM, GroqRefusal, GroqVerdict};
use crate::ids;

/// What a triple of `x-ratelimit-*` headers counts, in the dialect Groq and OpenAI share.
#[derive(Clone, Copy)]
pub(super) enum Counted {
    Requests,
    Tokens,
}

/// `x-ratelimit-limit-*`, `-remaining-*` and `-reset-*` (a Go-style duration) of one count.
pub(super) fn insert_limits(
    h: &mut HeaderMap,
    counted: Counted,
    limit: u64,
    remaining: u64,
    reset_in_ms: u64,
) {
    let [limit_name, remaining_name, reset_name] = match counted {
        Counted::Requests => [
            "x-ratelimit-limit-requests",
            "x-ratelimit-remaining-requests",
            "x-ratelimit-reset-requests",
        ],
        Counted::Tokens => [
            "x-ratelimit-limit-tokens",
            "x-ratelimit-remaining-tokens",
            "x-ratelimit-reset-tokens",
        ],
    };
    h.insert(
        HeaderName::from_static(limit_name),
        HeaderValue::from(limit),
    );
    h.insert(
        HeaderName::from_static(remaining_name),
        HeaderValue::from(remaining),
    );
    if let Ok(reset) = HeaderValue::try_from(go_duration(reset_in_ms)) {
        h.insert(HeaderName::from_static(reset_name), reset);
    }
}

/// The six `x-ratelimit-*` headers Groq sends on every response.
pub(crate) fn groq_headers(v: &GroqVerdict) -> HeaderMap {
    let mut h = HeaderMap::with_capacity(7);
    insert_limits(
        &mut h,
        Counted::Requests,
        v.rpd.into(),
        v.remaining_requests.into(),
        v.reset_requests_ms,
    );
    insert_limits(
        &mut h,
        Counted::Tokens,
        GROQ_TPM,
        v.remaining_tokens,
        v.reset_tokens_ms,
    );
    h
}

#[derive(Serialize)]
struct GroqError<'a> {
    message: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    code: &'static str,
}

/// Groq's RPM or RPD 429 (docs/providers.md §4.2) with `retry-after` and the six headers.
pub(crate) fn groq_429(model: &str, key: &str, v: &GroqVerdict, refusal: GroqRefusal) -> Response {
    let (per, limit, used, wait_ms) = match refusal {
        GroqRefusal::PerDay { wait_ms } => ("requests per day (RPD)", v.rpd, v.rpd, wait_ms),
        GroqRefusal::PerMinute { limit, used } => {
            ("requests per minute (RPM)", limit, used, v.reset_tokens_ms)
        }
    };
    let message = format!(
        "Rate limit reached for model `{model}` in organization `{}` service tier `on_demand` on {per}: Limit {limit}, Used {used}, Requested 1. Please try again in {}. Need more tokens? Upgrade to Dev Tier today at https://console.groq.com/settings/billing",
        ids::org_id(key),
        go_duration(wait_ms),
    );
    let body = to_json(&json!({ "error": GroqError {
        message: &message,
        kind: "requests",
        code: "rate_limit_exceeded",
    }}));
    let mut headers = groq_headers(v);
    headers.insert(
        header::RETRY_AFTER,
        HeaderValue::from(wait_ms.div_ceil(1000).max(1)),
    );
    json_response(StatusCode::TOO_MANY_REQUESTS, headers, body)
}

/// Go-style duration as Groq writes it (docs/providers.md §4.1): `7.66s`, `2m59.56s`, `1m26.4s`,
/// `20s`, `8h`,
/// `450ms`.
pub(super) fn go_duration(ms: u64) -> String {
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
}
