//! OpenRouter's 429s, by who refused: the account's free tier (docs/providers.md §2.2), one
//! model's shared capacity (§2.3), and the upstream providers behind OpenRouter (§2.4).
//!
//! They sit together because a client can tell them apart only by these bodies and headers:
//! the free tier and the capacity cap carry `X-RateLimit-*` (echoed in `metadata.headers`), an
//! upstream 429 names its provider and at most a `Retry-After`, and the typed and bare 429s say
//! less and less. That difference is what freeway's classifier decides a rest by, so it should
//! be visible side by side.

use serde_json::json;

use super::error::{ErrorObj, ErrorReply, HeaderEcho, Metadata};
use super::strike::Strike;
use crate::account::Refusal;
use crate::clock::window_start;
use crate::config::Shape;
use crate::ids;

const UPSTREAM_REMEDY: &str = "Retry shortly, add your own provider key (https://openrouter.ai/settings/integrations), or route to another provider with provider routing: https://openrouter.ai/docs/features/provider-routing";

/// The account's free-tier 429s: per minute, per day, per day with a high balance
/// (docs/providers.md §2.2).
pub(crate) fn free_tier_429(refusal: Refusal, shape: Shape, key: &str) -> ErrorReply {
    let (message, limit_source, remedy_hint, limit, reset_ms) = match refusal {
        Refusal::PerMinute { limit, reset_ms } => (
            match shape {
                // The 2026 text really ends in ". " (docs/providers.md §2.2).
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
        // The only capture of this one (via a proxy) lacks `provider_name` and `user_id`; they
        // are kept here as in the two above, which OpenRouter itself sent.
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

/// `upstream_429`: an upstream provider's shared pool is saturated (docs/providers.md §2.4).
pub(super) fn upstream_429(f: &Strike<'_>) -> ErrorReply {
    let model = f.ctx.model;
    let mut meta = Metadata {
        raw: Some(format!(
            "{model} is temporarily rate-limited upstream. Please retry shortly, or add your own key to accumulate your rate limits: https://openrouter.ai/settings/integrations"
        )),
        provider_name: Some(Some(f.spec.provider().to_owned())),
        is_byok: Some(false),
        limit_source: Some("upstream_provider_shared_pool"),
        remedy_hint: Some(UPSTREAM_REMEDY),
        ..Metadata::default()
    };
    // docs/providers.md §2.4: a retry hint appears rounded up, raw, and echoed as a header.
    let retry = f.spec.retry_after_s.map(|raw| {
        let secs = raw.ceil() as u64;
        meta.retry_after_seconds = Some(secs);
        meta.retry_after_seconds_raw = Some(raw);
        meta.headers = Some(HeaderEcho(vec![("Retry-After", secs.to_string())]));
        secs
    });
    let error = ErrorObj::new(f.status, "Provider returned error")
        .with(meta)
        .shaped(f.shape);
    let reply = f.reply(error);
    match retry {
        Some(secs) => reply.retry_after(secs),
        None => reply,
    }
}

/// `high_demand`: OpenRouter caps one popular `:free` model for all users at once
/// (docs/providers.md §2.3).
pub(super) fn high_demand_429(f: &Strike<'_>) -> ErrorReply {
    let model = f.ctx.model;
    let limit = f.spec.limit.unwrap_or(8);
    let slug = model.strip_suffix(":free").unwrap_or(model);
    let uuid = ids::uuid_for(model);
    let tail = format!(
        "High demand for {model} on OpenRouter - limited to {limit} requests per minute. Please retry shortly."
    );
    // docs/providers.md §2.3: the 2025 limiter id has a `limit_rpm/` prefix, the Sep-2026 one does
    // not.
    let message = match f.shape {
        Shape::Y2025 => format!("Rate limit exceeded: limit_rpm/{slug}/{uuid}. {tail}"),
        Shape::Y2026 => format!("Rate limit exceeded: {slug}/{uuid}. {tail}"),
    };
    let error = ErrorObj::new(f.status, message)
        .with(Metadata {
            provider_name: Some(None),
            limit_source: Some("openrouter_shared_capacity"),
            // Only the start of this hint was captured.
            remedy_hint: Some(
                "Retry shortly, or add your own provider key (https://openrouter.ai/settings/integrations) to use your own rate limits.",
            ),
            ..Metadata::default()
        })
        .shaped(f.shape);
    // A per-minute cap resets on the next whole minute.
    let reset_ms = window_start(f.ctx.now_ms, 60_000) + 60_000;
    f.reply(error).rate_limited(limit, reset_ms)
}

/// `typed_429`: the documented typed error; `provider_code` says it came from upstream
/// (docs/providers.md §2.4).
pub(super) fn typed_429(f: &Strike<'_>) -> ErrorReply {
    f.reply(
        ErrorObj::new(f.status, "Rate limit exceeded").with(Metadata {
            error_type: Some("rate_limit_exceeded"),
            provider_code: Some(
                f.spec
                    .provider_code
                    .clone()
                    .unwrap_or_else(|| "rate_limited".to_owned()),
            ),
            ..Metadata::default()
        }),
    )
}

/// `generic_429`: the bare OpenAPI example: nothing says who refused, not even a user
/// (docs/providers.md §2.4).
pub(super) fn generic_429(f: &Strike<'_>) -> ErrorReply {
    ErrorReply::new(
        f.status,
        ErrorObj::new(f.status, "Rate limit exceeded"),
        None,
    )
}

/// `capacity_429`: every provider of the model is at capacity, the documented availability error
/// (docs/providers.md §2.4).
pub(super) fn capacity_429(f: &Strike<'_>) -> ErrorReply {
    let model = f.ctx.model;
    let secs = f.spec.retry_after_s.unwrap_or(40.0).ceil() as u64;
    // Literal docs example: `error_type` + `http_status` instead of `code`.
    let error = ErrorObj {
        message: format!("All providers for {model} are at capacity. Retry after {secs} seconds."),
        code: None,
        error_type: Some("rate_limit_exceeded"),
        http_status: Some(f.status),
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
    f.reply(error).retry_after(secs)
}
