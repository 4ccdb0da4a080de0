//! The rules of docs/design.md §3, first match wins: billing first (any status that can carry
//! it), then the shared-route table, then the other statuses; and how long each rest lasts.
//!
//! Every rule reads facts from [`Signals`] (a code, a `limit_source`, a header the dialect
//! trusts, a quota named in the message), never one provider's sample text, so the same rule
//! covers every provider that states the same fact.

use super::signals::Signals;
use super::verdict::{
    CIRCUIT_MS, DEFAULT_REST_MS, GONE_REST_MS, MIN_EPOCH_MS, POOL_REST_CAP_MS, ROLLING_DAY_CAP_MS,
    RestLength, RestScope, Verdict,
};
use crate::catalog::OPENROUTER;
use crate::day::next_midnight_ms;
use crate::dialect::{DayClock, Dialect};
use crate::route::{Connection, Route};

/// The part of a classification a rule decides.
pub(super) struct Decision {
    pub verdict: Verdict,
    pub scope: RestScope,
    pub length: Option<RestLength>,
    pub evidence: bool,
    pub rule: &'static str,
    /// The rest is a spent day's.
    pub day: bool,
}

/// Decide a failed answer of `status` on `route`.
pub(super) fn decide(status: u16, s: &Signals, route: &Route, now_ms: u64) -> Decision {
    if matches!(status, 400 | 402 | 403 | 429)
        && let Some(decision) = billing(status, s, route, now_ms)
    {
        return decision;
    }
    if (400..500).contains(&status)
        && status != 408
        && let Some(decision) = what_it_says(status, s, route, now_ms)
    {
        return decision;
    }
    match status {
        402 | 429 => match &route.pool {
            Some(pool) => shared_rule(s, route, pool, now_ms),
            None => off_quota_rule(status, s, route, now_ms),
        },
        401 | 403 if s.content_block => Decision::bare(Verdict::Client, "moderation"),
        401 | 403 => Decision::circuit(Verdict::Auth, route, "auth"),
        408 => Decision::bare(Verdict::Server, "server"),
        400..=499 if s.content_block => Decision::bare(Verdict::Client, "moderation"),
        400..=499 => Decision::bare(Verdict::Client, "client"),
        // 5xx (524, 529 included) and anything a provider should never answer with.
        _ => Decision::bare(Verdict::Server, "server"),
    }
}

/// docs/design.md §3.1: the key cannot pay; waiting will not fix it, except a transient spend
/// window (a 402 with a retry hint, OpenRouter's in-flight budget), which is `billing_wait`.
fn billing(status: u16, s: &Signals, route: &Route, now_ms: u64) -> Option<Decision> {
    let in_flight = s.limit_source.as_deref() == Some("in_flight_budget");
    let credits = s.limit_source.as_deref() == Some("credits")
        || s.kinds.iter().any(|k| {
            k == "insufficient_quota" || k.starts_with("billing_") || k.contains("credit")
        })
        || s.says(&[
            "insufficient credit",
            "credit balance",
            "out of credits",
            "more credits",
            "insufficient funds",
            "insufficient balance",
            "balance is too low",
            "negative balance",
            "spend limit",
            "spending limit",
            "can only afford",
        ]);
    if in_flight || (status == 402 && s.hint.is_some() && !credits) {
        let length = match s.hint {
            Some(h) => RestLength::For(h.ms.min(POOL_REST_CAP_MS)),
            None => RestLength::Guess(DEFAULT_REST_MS),
        };
        return Some(Decision {
            verdict: Verdict::BillingWait,
            scope: RestScope::Connection(route.connection_scope()),
            length: Some(length),
            evidence: false,
            rule: "3.1:billing_wait",
            day: false,
        });
    }
    if credits {
        return Some(Decision::circuit(Verdict::Billing, route, "3.1:billing"));
    }
    // A spend limit the account set ("You have reached your specified API usage limits. You
    // will regain access on <date>"): the connection rests until that moment, as long as a
    // circuit at most; past the cap, one probe finds out.
    if let Some(regain_ms) = s.regain_at_ms
        && s.says(&["usage limit"])
    {
        let wait_ms = regain_ms.saturating_sub(now_ms);
        let length = match wait_ms <= CIRCUIT_MS {
            true => RestLength::Until(regain_ms),
            false => RestLength::Guess(CIRCUIT_MS),
        };
        return Some(Decision {
            length: Some(length),
            ..Decision::circuit(Verdict::Billing, route, "3.1:usage_limit")
        });
    }
    // A negative balance blocks OpenRouter's free models too, and says so only with a 402.
    let openrouter_platform =
        route.provider == OPENROUTER && route.connection == Connection::Platform;
    (status == 402 && openrouter_platform)
        .then(|| Decision::circuit(Verdict::Billing, route, "3.1:402"))
}

/// docs/design.md §3.2.1: the code and the message count, not only the status. Whatever the
/// 4xx, an answer that says the model is dead, the key is blocked, the request alone is too
/// large, or the model is out of capacity for everyone is read as that: the status alone sends a
/// dead model's 400 to `client` (every run spends an attempt on it again) and a too-large
/// request's 429 to a rest that blocks the smaller requests that would pass.
fn what_it_says(status: u16, s: &Signals, route: &Route, now_ms: u64) -> Option<Decision> {
    if is_gone(status, s) {
        return Some(Decision {
            length: Some(RestLength::Long(now_ms.saturating_add(GONE_REST_MS))),
            ..Decision::route(Verdict::Gone, route, s, now_ms, "gone")
        });
    }
    if is_blocked(s) {
        return Some(Decision::circuit(Verdict::Auth, route, "3.3:blocked"));
    }
    if is_too_large(s) {
        return Some(Decision::bare(Verdict::Client, "3.3:too_large"));
    }
    // A route rest, not the pool's: the provider is full for every key, so this is no quota
    // spent and no pacing miss.
    if says_the_model_is_out_of_capacity(s) {
        return Some(Decision::route(
            Verdict::Route,
            route,
            s,
            now_ms,
            "3.3:capacity",
        ));
    }
    None
}

/// A dead route or model: its code (`model_not_found`, `model_decommissioned`), HTTP's own
/// 410 Gone, a wording that says a model is dead, or a 404's "No endpoints found for …".
fn is_gone(status: u16, s: &Signals) -> bool {
    if s.kind_is("model_not_found") || s.kind_is("model_decommissioned") || status == 410 {
        return true;
    }
    if status == 404 && s.says(&["no endpoints found for", "does not exist"]) {
        return true;
    }
    // Elsewhere a wording counts only after the word "model": "is no longer supported" or "does
    // not exist" alone may be said of a parameter or a tool, and a dead route rests an hour.
    let after_model = s.message.find("model").map_or("", |at| &s.message[at..]);
    s.message.contains("not a valid model id")
        || says_a_model_is_not_found(&s.message)
        || [
            "has been decommissioned",
            "is no longer supported",
            "is no longer available",
            "does not exist",
        ]
        .iter()
        .any(|n| after_model.contains(n))
}

/// "Model not found", "The model `x` was not found", "models/x is not found for API version …":
/// "not found" in the clause the word "model" opens, its name (dots and all) between them. A
/// later sentence's "not found" (a tool's, a file's) is not the model's.
fn says_a_model_is_not_found(message: &str) -> bool {
    /// How far past "model" its "not found" may be: a long model name and a few words.
    const CLAUSE: usize = 120;
    message.match_indices("model").any(|(at, _)| {
        let after = &message[at..];
        let end = [
            after.find(". "),
            after.char_indices().nth(CLAUSE).map(|(i, _)| i),
        ]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(after.len());
        after[..end].contains("not found")
    })
}

/// A key or organisation the provider has blocked: every route on it would burn an attempt.
fn is_blocked(s: &Signals) -> bool {
    [
        "organization_restricted",
        "account_deactivated",
        "access_terminated",
    ]
    .iter()
    .any(|k| s.kind_is(k))
        || s.says(&[
            "organization has been restricted",
            "account deactivated",
            "deactivated account",
            "account has been deactivated",
            "api key has been deactivated",
            "access terminated",
            "access has been terminated",
        ])
}

/// A request that alone exceeds a limit: waiting fixes nothing, and a smaller request on the same
/// route would pass. Groq and OpenAI say it in words, and in numbers too: the tokens requested
/// above the limit itself ("Limit 6000, Requested 9000"), where a rate limit's request fits the
/// limit and only the used part overflows. A limit of 0 is a quota with nothing left (a spent
/// day, a model the tier does not serve), which no smaller request passes either.
fn is_too_large(s: &Signals) -> bool {
    let m = &s.message;
    s.says(&[
        "request too large",
        "must be reduced",
        "reduce your message size",
    ]) || (m.contains("exceeds the maximum") && m.contains("per request"))
        || matches!(
            (number_after(m, "limit "), number_after(m, "requested ")),
            (Some(limit), Some(requested)) if limit > 0 && requested > limit
        )
}

/// The first number written right after `word` ("limit 6000" → 6000).
fn number_after(message: &str, word: &str) -> Option<u64> {
    message.match_indices(word).find_map(|(at, _)| {
        let tail = &message[at + word.len()..];
        let digits = tail.bytes().take_while(u8::is_ascii_digit).count();
        tail[..digits].parse().ok()
    })
}

/// A provider out of capacity for a model, for everyone: Google's `MODEL_CAPACITY_EXHAUSTED`
/// reason ("No capacity available for model …"), Mistral's "Service tier capacity exceeded",
/// "overloaded".
fn says_the_model_is_out_of_capacity(s: &Signals) -> bool {
    s.kind_is("model_capacity_exhausted")
        || s.says(&[
            "no capacity available",
            "service tier capacity exceeded",
            "overloaded",
        ])
}

/// docs/design.md §3.2 for a 402 or 429 on a shared route: the first rule that matches wins.
fn shared_rule(s: &Signals, route: &Route, pool: &str, now_ms: u64) -> Decision {
    match s.limit_source.as_deref() {
        Some("free_tier_per_minute" | "free_tier_daily") => {
            return Decision::pool(pool, route, s, now_ms, "0:limit_source");
        }
        Some("shared_capacity") => {
            return Decision::route(Verdict::Route, route, s, now_ms, "0:limit_source");
        }
        Some("upstream_provider_shared_pool") => {
            return Decision::route(Verdict::Provider, route, s, now_ms, "0:limit_source");
        }
        _ => {}
    }
    if says_one_model_is_at_capacity(s) {
        return Decision::route(Verdict::Route, route, s, now_ms, "0:capacity");
    }
    // Only where the dialect says so: Groq's or OpenAI's `x-ratelimit-*` describe one model.
    if route.dialect.headers_are_pool_wide() && s.headers.any_with_prefix("x-ratelimit-") {
        return Decision::pool(pool, route, s, now_ms, "1:x-ratelimit");
    }
    // The account's quota named in the message survives proxies that strip headers and
    // metadata, and bodies re-typed as Anthropic's `rate_limit_error`.
    if s.says(&["free-models-per-min", "free-models-per-day"]) {
        return Decision::pool(pool, route, s, now_ms, "1b:free-models");
    }
    if s.provider_marker {
        return Decision::route(Verdict::Provider, route, s, now_ms, "2:provider_marker");
    }
    if s.kind_is("rate_limit_exceeded") || s.kind_is("rate_limit_error") {
        return Decision::pool(pool, route, s, now_ms, "3:rate_limit_exceeded");
    }
    // Gemini's quota refusal is the key's quota for this model, which its pool is; the same
    // shape relayed by another provider says nothing about whose quota it was. Gemini also says
    // `RESOURCE_EXHAUSTED` of a model out of capacity, so only a quota named counts.
    if s.kind_is("resource_exhausted")
        && route.dialect == Dialect::Gemini
        && (s.quota_failure || s.message.contains("quota"))
    {
        return Decision::pool(pool, route, s, now_ms, "3:resource_exhausted");
    }
    Decision {
        evidence: true,
        ..Decision::route(Verdict::Ambiguous, route, s, now_ms, "4:ambiguous")
    }
}

/// A 402 or 429 on an off-quota route closes that route (or its connection) alone.
fn off_quota_rule(status: u16, s: &Signals, route: &Route, now_ms: u64) -> Decision {
    if status == 402 {
        return Decision::circuit(Verdict::Billing, route, "off_quota");
    }
    let verdict = if s.provider_marker {
        Verdict::Provider
    } else {
        Verdict::Route
    };
    Decision::route(verdict, route, s, now_ms, "off_quota")
}

/// One model's capacity, not the account's: `capacity_exhausted` (as a code, or the
/// `availability.code` of a model-availability error), "High demand for … limited to N
/// requests", a per-model limiter id (`limit_rpm/…`), "is temporarily rate-limited upstream".
fn says_one_model_is_at_capacity(s: &Signals) -> bool {
    s.kind_is("capacity_exhausted")
        || says_high_demand(&s.message)
        || s.says(&[
            "limit_rpm/",
            "limit_rpd/",
            "is temporarily rate-limited upstream",
        ])
}

/// "High demand for <model> … limited to <N> requests" (the message is lowercase already).
pub(super) fn says_high_demand(message: &str) -> bool {
    let Some(at) = message.find("high demand for ") else {
        return false;
    };
    let after = &message[at..];
    after.match_indices("limited to ").any(|(i, needle)| {
        let rest = &after[i + needle.len()..];
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        digits > 0 && rest[digits..].starts_with(" request")
    })
}

impl Decision {
    pub(super) fn bare(verdict: Verdict, rule: &'static str) -> Self {
        Decision {
            verdict,
            scope: RestScope::None,
            length: None,
            evidence: false,
            rule,
            day: false,
        }
    }

    fn pool(pool: &str, route: &Route, s: &Signals, now_ms: u64, rule: &'static str) -> Self {
        let day = day_length(s, route, now_ms);
        Decision {
            verdict: Verdict::Account,
            scope: RestScope::Pool(pool.to_string()),
            day: day.is_some(),
            length: Some(day.unwrap_or_else(|| pool_length(s, now_ms))),
            evidence: false,
            rule,
        }
    }

    fn route(
        verdict: Verdict,
        route: &Route,
        s: &Signals,
        now_ms: u64,
        rule: &'static str,
    ) -> Self {
        let day = day_length(s, route, now_ms);
        Decision {
            verdict,
            scope: RestScope::Route {
                pool: route.pool.clone(),
                route_key: route.key(),
            },
            day: day.is_some(),
            length: Some(day.unwrap_or_else(|| route_length(s))),
            evidence: false,
            rule,
        }
    }

    fn circuit(verdict: Verdict, route: &Route, rule: &'static str) -> Self {
        Decision {
            verdict,
            scope: RestScope::Connection(route.connection_scope()),
            length: Some(RestLength::Guess(CIRCUIT_MS)),
            evidence: false,
            rule,
            day: false,
        }
    }
}

/// OpenRouter's `X-RateLimit-Reset`: a moment in epoch ms. A value too small to be one (epoch
/// seconds or a delta from another API) is ignored rather than read as a moment in 1970.
fn reset_at_ms(s: &Signals) -> Option<u64> {
    s.headers
        .get("x-ratelimit-reset")
        .and_then(|v| v.trim().parse::<u64>().ok())
        .filter(|&ms| ms >= MIN_EPOCH_MS)
}

/// Pool rest: the hint; else the reset moment; else the default.
fn pool_length(s: &Signals, now_ms: u64) -> RestLength {
    if let Some(hint) = s.hint {
        return RestLength::For(hint.ms);
    }
    match reset_at_ms(s) {
        Some(at) if at.saturating_sub(now_ms) > POOL_REST_CAP_MS => {
            RestLength::For(POOL_REST_CAP_MS)
        }
        Some(at) => RestLength::Until(at),
        None => RestLength::Guess(DEFAULT_REST_MS),
    }
}

/// Route rest: the hint, else the reset moment, else the default.
fn route_length(s: &Signals) -> RestLength {
    if let Some(hint) = s.hint {
        return RestLength::For(hint.ms);
    }
    match reset_at_ms(s) {
        Some(at) => RestLength::Until(at),
        None => RestLength::Guess(DEFAULT_REST_MS),
    }
}

/// The rest of a spent day (docs/design.md §3.2), when this is a day refusal: one that says so,
/// or whose wait is more than 300 s away. On a fixed day clock it lasts until that zone's next
/// midnight, whatever shorter hint came with it; on a rolling day, for its hint (up to a day).
fn day_length(s: &Signals, route: &Route, now_ms: u64) -> Option<RestLength> {
    let wait = s
        .hint
        .map(|h| h.ms)
        .or_else(|| Some(reset_at_ms(s)?.saturating_sub(now_ms)));
    let says_day = s.says(&[
        "per day",
        "per-day",
        "free-models-per-day",
        "(rpd)",
        "(tpd)",
    ]) || s
        .limit_source
        .as_deref()
        .is_some_and(|l| l.ends_with("_daily"))
        || s.day_quota_id;
    if !(says_day || wait.is_some_and(|ms| ms > POOL_REST_CAP_MS)) {
        return None;
    }
    match (route.day, wait) {
        (DayClock::Fixed(zone), _) => Some(RestLength::Long(next_midnight_ms(zone, now_ms))),
        (DayClock::Rolling, Some(ms)) => Some(RestLength::Long(
            now_ms.saturating_add(ms.min(ROLLING_DAY_CAP_MS)),
        )),
        (DayClock::Rolling, None) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn high_demand_needs_a_number_of_requests() {
        assert!(says_high_demand(
            "high demand for qwen/qwen3-coder:free on openrouter - limited to 8 requests per minute."
        ));
        assert!(!says_high_demand(
            "high demand for x - limited to many requests"
        ));
        assert!(!says_high_demand("limited to 8 requests per minute"));
    }
}
