//! Gemini's quota refusal (docs/providers.md §5.1): a 429 with a JSON array body.
//!
//! Gemini writes no rate-limit headers; everything is in the body, as Google's RPC error: a
//! `QuotaFailure` naming the quota that was spent (its `quotaId` says per minute or per day), a
//! `Help` link and a `RetryInfo` whose `retryDelay` is a protobuf duration. Some paths wrap that
//! envelope in an array, which is the shape served here because clients must read both.

use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde_json::json;

use super::{json_response, to_json};
use crate::account::GeminiRefusal;

/// The 429 of a spent per-model minute or day.
pub(crate) fn gemini_429(model: &str, refusal: &GeminiRefusal) -> Response {
    let (quota_id, metric) = if refusal.per_day {
        (
            "GenerateRequestsPerDayPerProjectPerModel-FreeTier",
            "generativelanguage.googleapis.com/generate_content_free_tier_requests",
        )
    } else {
        (
            "GenerateRequestsPerMinutePerProjectPerModel-FreeTier",
            "generativelanguage.googleapis.com/generate_content_free_tier_requests",
        )
    };
    let seconds = refusal.retry_in_ms.div_ceil(1000).max(1);
    let message = format!(
        "You exceeded your current quota, please check your plan and billing details. For more \
         information on this error, head to: https://ai.google.dev/gemini-api/docs/rate-limits. \
         To monitor your current usage, head to: https://ai.dev/rate-limit. \n* Quota exceeded \
         for metric: {metric}, limit: {}, model: {model}\nPlease retry in {seconds}s.",
        refusal.limit
    );
    let body = json!([{
        "error": {
            "code": 429,
            "message": message,
            "status": "RESOURCE_EXHAUSTED",
            "details": [
                {
                    "@type": "type.googleapis.com/google.rpc.QuotaFailure",
                    "violations": [{
                        "quotaMetric": metric,
                        "quotaId": quota_id,
                        "quotaDimensions": { "location": "global", "model": model },
                        "quotaValue": refusal.limit.to_string(),
                    }]
                },
                {
                    "@type": "type.googleapis.com/google.rpc.Help",
                    "links": [{
                        "description": "Learn more about Gemini API quotas",
                        "url": "https://ai.google.dev/gemini-api/docs/rate-limits"
                    }]
                },
                {
                    "@type": "type.googleapis.com/google.rpc.RetryInfo",
                    "retryDelay": format!("{seconds}s")
                }
            ]
        }
    }]);
    json_response(
        StatusCode::TOO_MANY_REQUESTS,
        HeaderMap::new(),
        to_json(&body),
    )
}

/// The 400 of a request whose earlier tool call lost the thought signature Gemini gave it
/// (docs/providers.md §5.2): the call's name as `default_api:NAME` and the turn's position.
pub(crate) fn gemini_missing_signature(name: &str, position: usize) -> Response {
    let message = format!(
        "Function call is missing a thought_signature in functionCall parts. This is required \
         for tools to work correctly, and missing thought_signature may lead to degraded model \
         performance. Additional data, function call `default_api:{name}` , position \
         {position}. Please refer to https://ai.google.dev/gemini-api/docs/thought-signatures \
         for more details."
    );
    let body = json!([{
        "error": { "code": 400, "message": message, "status": "INVALID_ARGUMENT" }
    }]);
    json_response(StatusCode::BAD_REQUEST, HeaderMap::new(), to_json(&body))
}
