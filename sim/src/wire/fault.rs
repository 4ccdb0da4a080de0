//! Injected faults: which body each fault kind is served with.
//!
//! `fault_error` is the one place that maps a kind to its pre-stream refusal, so the server makes
//! one call and a new kind is one new arm. The bodies live with the others from the same refuser:
//! 429s in `rate_limit`, 402s in `billing`; here are the kinds nothing else sends (credentials,
//! moderation, policy, bad model, 5xx, docs/providers.md §2.6, §2.7) and the in-band errors of
//! faults served inside a 200 (§2.8).

use super::billing;
use super::data_frame;
use super::error::{ErrorObj, ErrorReply, Metadata, no_auth_credentials};
use super::rate_limit;
use super::strike::{FaultCtx, Strike};
use crate::faults::{ErrorCode, FaultKind, FaultSpec};
use axum::body::Bytes;
use serde::Serialize;

const MASKED_500: &str = "Internal Server Error";
const SERVER_ERROR: &str = "The server had an error processing your request";

/// The pre-stream error of an error fault; `None` for faults served as a 200.
pub(crate) fn fault_error(spec: &FaultSpec, ctx: &FaultCtx<'_>) -> Option<ErrorReply> {
    let f = Strike {
        spec,
        ctx,
        shape: spec.shape.unwrap_or(ctx.shape),
        status: spec.kind.status(),
    };
    let reply = match spec.kind {
        FaultKind::Upstream429 => rate_limit::upstream_429(&f),
        FaultKind::HighDemand => rate_limit::high_demand_429(&f),
        FaultKind::Typed429 => rate_limit::typed_429(&f),
        FaultKind::Generic429 => rate_limit::generic_429(&f),
        FaultKind::Capacity429 => rate_limit::capacity_429(&f),
        FaultKind::Credits402 => billing::credits_402(&f),
        FaultKind::NeverPurchased402 => billing::never_purchased_402(&f),
        FaultKind::CanOnlyAfford402 => billing::can_only_afford_402(&f),
        FaultKind::InFlight402 => billing::in_flight_402(&f),
        FaultKind::Unauthorized401 => no_auth_credentials(),
        FaultKind::Moderation403 => moderation_403(&f),
        FaultKind::NotFound404 => f.reply(ErrorObj::new(
            f.status,
            "No endpoints found matching your data policy (Free model publication). Configure: https://openrouter.ai/settings/privacy",
        )),
        FaultKind::NoEndpoints404 => f.reply(ErrorObj::new(
            f.status,
            format!("No endpoints found for {}.", ctx.model),
        )),
        // The request's own fault (docs/providers.md §1.1's `models` limit): "not a valid model ID"
        // would be a dead model, which `no_endpoints_404` plays.
        FaultKind::BadRequest400 => f.reply(ErrorObj::new(
            f.status,
            "'models' array must have 3 items or fewer.",
        )),
        // docs/providers.md §2.7: the 500 path masks the message and carries no provider_code.
        FaultKind::Server500 => f.reply(ErrorObj::new(f.status, MASKED_500)),
        FaultKind::BadGateway502 | FaultKind::Overloaded529 => provider_failure(&f),
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

/// `moderation_403`: the input was flagged by the provider's moderation (docs/providers.md §2.6).
fn moderation_403(f: &Strike<'_>) -> ErrorReply {
    let (model, provider) = (f.ctx.model, f.spec.provider());
    f.reply(
        ErrorObj::new(
            f.status,
            format!(
                "{model} requires moderation on {provider}. Your input was flagged for \"misc\". No credits were charged."
            ),
        )
        .with(Metadata {
            provider_name: Some(Some(provider.to_owned())),
            reasons: Some(["misc"]),
            flagged_input: Some(flagged_input(f.ctx.user_text)),
            model_slug: Some(model.to_owned()),
            ..Metadata::default()
        }),
    )
}

/// `flagged_input` keeps at most 100 characters of the input, cut in the middle: the captured
/// value is 50 characters, `...`, and the last 50 (docs/providers.md §2.6).
fn flagged_input(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    if chars.len() <= 100 {
        return text.to_owned();
    }
    let head: String = chars[..50].iter().collect();
    let tail: String = chars[chars.len() - 50..].iter().collect();
    format!("{head}...{tail}")
}

/// `bad_gateway_502` and `overloaded_529`: the upstream provider failed, OpenRouter passes on its
/// raw text (docs/providers.md §2.7).
fn provider_failure(f: &Strike<'_>) -> ErrorReply {
    let (raw, error_type) = if f.spec.kind == FaultKind::Overloaded529 {
        ("Overloaded", Some("provider_overloaded"))
    } else {
        ("upstream connect error", None)
    };
    f.reply(
        ErrorObj::new(f.status, "Provider returned error")
            .with(Metadata {
                raw: Some(raw.to_owned()),
                provider_name: Some(Some(f.spec.provider().to_owned())),
                is_byok: Some(false),
                error_type,
                ..Metadata::default()
            })
            .shaped(f.shape),
    )
}

/// The in-band error of a `midstream_error` fault (docs/providers.md §2.8).
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
        // Moderation of the upstream's input, relayed inside the stream (docs/providers.md §2.6,
        // the 403's metadata).
        ErrorCode::Number(403) => (
            "Your input was flagged for \"misc\". No credits were charged.",
            Metadata {
                provider_name: Some(Some(spec.provider().to_owned())),
                reasons: Some(["misc"]),
                flagged_input: Some(String::new()),
                ..Metadata::default()
            },
        ),
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

/// The bare error of a `top_level_code` mid-stream error: DashScope-compatible servers send
/// `{"code","message","request_id"}` with neither `error` nor `choices` (docs/providers.md §2.8).
/// A 429 is their throttle as captured; a string code is sent as it is; anything else is their
/// internal error, with the fault's message.
pub(crate) fn bare_error(error: &ErrorObj, request_id: &str) -> Vec<u8> {
    #[derive(Serialize)]
    struct Bare<'a> {
        code: &'a str,
        message: &'a str,
        request_id: &'a str,
    }
    let (code, message) = match &error.code {
        Some(ErrorCode::Number(429)) => (
            "Throttling.AllocationQuota",
            "Free allocated quota exceeded.",
        ),
        Some(ErrorCode::Text(code)) => (code.as_str(), error.message.as_str()),
        _ => ("InternalError", error.message.as_str()),
    };
    super::to_json(&Bare {
        code,
        message,
        request_id,
    })
}

/// [`bare_error`] as one SSE data frame.
pub(crate) fn bare_error_frame(error: &ErrorObj, request_id: &str) -> Bytes {
    data_frame(&bare_error(error, request_id))
}

/// `wrong_content_type`: an HTML page where JSON or SSE was expected.
pub(crate) const HTML_PAGE: &str = "<html>\n<head><title>OpenRouter</title></head>\n<body><h1>Service temporarily unavailable</h1><p>Please try again in a few moments.</p></body>\n</html>\n";

#[cfg(test)]
mod tests {
    use super::*;

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
