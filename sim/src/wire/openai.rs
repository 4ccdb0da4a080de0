//! OpenAI's request-limit shapes, which the generic provider speaks when it has a limit
//! (docs/providers.md §5): `x-ratelimit-*-requests` on every answer, the limit being the
//! window's (unlike Groq's day), and the 429 with `type` and a `param` of null.

use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::Response;
use serde::Serialize;
use serde_json::json;

use super::groq::{Counted, go_duration, insert_limits};
use super::{json_response, to_json};
use crate::account::WindowState;
use crate::ids;

/// The window's limit, what is left of it, and the time until it ends as a duration.
pub(crate) fn requests_headers(w: &WindowState, now_ms: u64) -> HeaderMap {
    let mut h = HeaderMap::with_capacity(4);
    let reset_in_ms = w.reset_ms.saturating_sub(now_ms);
    insert_limits(
        &mut h,
        Counted::Requests,
        w.limit.into(),
        w.remaining.into(),
        reset_in_ms,
    );
    h
}

#[derive(Serialize)]
struct OpenAiError<'a> {
    message: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    param: Option<()>,
    code: &'static str,
}

/// The RPM refusal, worded as OpenAI's TPM one, with `retry-after` to the window's end.
pub(crate) fn openai_429(model: &str, key: &str, w: &WindowState, now_ms: u64) -> Response {
    let wait_ms = w.reset_ms.saturating_sub(now_ms);
    let message = format!(
        "Rate limit reached for {model} in organization {} on requests per min (RPM): Limit {}, \
         Used {}, Requested 1. Please try again in {}.",
        ids::org_id(key),
        w.limit,
        w.limit,
        go_duration(wait_ms),
    );
    let body = to_json(&json!({ "error": OpenAiError {
        message: &message,
        kind: "requests",
        param: None,
        code: "rate_limit_exceeded",
    }}));
    let mut headers = requests_headers(w, now_ms);
    headers.insert(
        header::RETRY_AFTER,
        HeaderValue::from(wait_ms.div_ceil(1000).max(1)),
    );
    json_response(StatusCode::TOO_MANY_REQUESTS, headers, body)
}
