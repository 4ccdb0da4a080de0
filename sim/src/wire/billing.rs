//! OpenRouter's 402s: the key's account cannot pay for the request (docs/providers.md §2.5).
//!
//! Kept apart from the 429s because a 402 is about money, not the clock: most end only when
//! someone adds credits, whatever a client waits. The in-flight budget is the one transient 402
//! and the only one with a `Retry-After`.

use serde_json::json;

use super::error::{ErrorObj, ErrorReply, Metadata};
use super::strike::Strike;

const CREDITS_REMEDY: &str = "Add credits at https://openrouter.ai/settings/credits, or lower max_tokens / prompt size to fit your remaining balance.";

/// `credits_402`: the balance is too low.
pub(super) fn credits_402(f: &Strike<'_>) -> ErrorReply {
    f.reply(
        ErrorObj::new(
            f.status,
            "Insufficient credits. Add more using https://openrouter.ai/settings/credits",
        )
        .with(Metadata {
            limit_source: Some("openrouter_credits"),
            remedy_hint: Some(CREDITS_REMEDY),
            ..Metadata::default()
        })
        .shaped(f.shape),
    )
}

/// `never_purchased_402`: an account that never bought credits asked for a paid model.
pub(super) fn never_purchased_402(f: &Strike<'_>) -> ErrorReply {
    f.reply(
        ErrorObj::new(
            f.status,
            "Insufficient credits. This account never purchased credits. Make sure your key is on the correct account or org, and if so, purchase more at https://openrouter.ai/settings/credits",
        )
        .with(Metadata {
            limit_source: Some("openrouter_credits"),
            ..Metadata::default()
        })
        .shaped(f.shape),
    )
}

/// `can_only_afford_402`: the balance covers fewer tokens than `max_tokens` asks for.
pub(super) fn can_only_afford_402(f: &Strike<'_>) -> ErrorReply {
    let requested = f.ctx.max_tokens.unwrap_or(65_536);
    let affordable = requested.saturating_sub(1).min(570);
    let message = format!(
        "This request requires more credits, or fewer max_tokens. You requested up to {requested} tokens, but can only afford {affordable}. To increase, visit https://openrouter.ai/settings/credits and add more credits"
    );
    let previous = json!([{"code": f.status, "message": message}]);
    f.reply(
        ErrorObj::new(f.status, message)
            .with(Metadata {
                provider_name: Some(None),
                limit_source: Some("openrouter_credits"),
                remedy_hint: Some(CREDITS_REMEDY),
                previous_errors: Some(previous),
                ..Metadata::default()
            })
            .shaped(f.shape),
    )
}

/// `in_flight_402`: requests still running hold the balance; retry once they settle.
pub(super) fn in_flight_402(f: &Strike<'_>) -> ErrorReply {
    let secs = f.spec.retry_after_s.unwrap_or(10.0).ceil() as u64;
    f.reply(
        ErrorObj::new(
            f.status,
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
        .shaped(f.shape),
    )
    .retry_after(secs)
}
