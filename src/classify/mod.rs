//! Classifying a failed attempt (docs/design.md §3): who refused, and what rest that calls for.
//!
//! A 429 from OpenRouter can mean the whole shared free account is spent, one model is in high
//! demand, or one upstream provider is saturated; each calls for a different rest, and guessing
//! wrong either keeps calling into a closed quota or closes a whole pool for one model's hiccup.
//! This module turns a response into that decision. It is made of pure functions of the response
//! (status, headers, body) and the route: no I/O, no clock beyond the `now_ms` they are given. The
//! rest itself is written, clamped and extended by [`crate::rest`], against Redis time.
//!
//! Readings of docs/design.md §3 that the table alone leaves open:
//! - The shared-route table applies to a 402 as to a 429 ("a 402 or 429 on a shared route"): a 402
//!   with `limit_source` `openrouter_in_flight_budget` is `account`, one with `openrouter_credits`
//!   is `billing`, and a bare 402 with no signal at all falls to rule 4, `ambiguous` — the body
//!   alone cannot tell a platform balance problem from anything else, and ambiguous evidence
//!   closes the pool only when other users corroborate it.
//! - Rule 0's per-model cap is recognised by its limiter id in the message too (`limit_rpm/…`,
//!   `limit_rpd/…`, docs/providers.md §2.3), not only by "High demand for … limited to N
//!   requests": both name one model's cap, and rule 1 would otherwise close the whole pool for it.
//! - `limit_source` is compared without its `openrouter_` prefix, because one capture spells the
//!   per-minute source `free_tier_per_minute`.
//! - A 403 guardrail block (`metadata.patterns`) is a content rejection like moderation: `client`,
//!   not an `auth` circuit that would close every route of the connection for an hour.
//! - `X-RateLimit-Reset` is epoch milliseconds on OpenRouter; a value too small to be one (epoch
//!   seconds or a delta from another API) is ignored rather than read as a moment in 1970.
//! - `Retry-After` is read as delta-seconds (integer or decimal) or an HTTP-date (RFC 9110), the
//!   latter as the time from `now_ms` to that moment.
//!
//! The answer is normalised first (`signals`), retry hints read in every provider's format
//! (`hints`), then the rules decide (`rules`).

mod hints;
mod rules;

pub use hints::{duration_ms, headroom_reset_ms};
mod signals;

use crate::headers::Headers;
use crate::provider::CallError;
use crate::route::Route;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use signals::Signals;
use std::fmt;

/// The shortest rest ever written: a rest "in the past" still closes for this long.
pub const MIN_REST_MS: u64 = 1_000;
/// The longest pool rest. A daily cap that resets hours away rests this long and is re-probed.
pub const POOL_REST_CAP_MS: u64 = 300_000;
/// The longest route rest.
pub const ROUTE_REST_CAP_MS: u64 = 300_000;
/// The longest rest past a scope's cap (a spent day, a dead route): a day and an hour, so a
/// midnight in any zone is covered.
pub const LONG_REST_CAP_MS: u64 = 25 * 3_600_000;
/// A dead route (`gone`: no endpoints, no such model) rests this long.
pub const GONE_REST_MS: u64 = 3_600_000;
/// A connection circuit (billing, auth) lasts this long, which is also its cap.
pub const CIRCUIT_MS: u64 = 3_600_000;
/// The rest when the response carries no hint of its own.
pub const DEFAULT_REST_MS: u64 = 60_000;
/// Ambiguous evidence counts only within this window.
pub const EVIDENCE_WINDOW_MS: u64 = 30_000;
/// At least this many ambiguous failures in the window…
pub const EVIDENCE_MIN_ENTRIES: u64 = 3;
/// …from at least this many distinct users close the pool.
pub const EVIDENCE_MIN_USERS: u64 = 2;
/// How long corroborated evidence rests the pool.
pub const EVIDENCE_POOL_REST_MS: u64 = 60_000;

/// `X-RateLimit-Reset` values below this (2001-09-09 in ms) are not epoch milliseconds.
const MIN_EPOCH_MS: u64 = 1_000_000_000_000;

/// Who refused the call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Account,
    Route,
    Provider,
    Ambiguous,
    Billing,
    /// A transient spend window (a 402 with a retry hint): a short connection rest.
    BillingWait,
    Auth,
    Client,
    /// The route is dead (no endpoints, no such model): a long route rest.
    Gone,
    Server,
}

impl Verdict {
    /// Account, route, provider, ambiguous and billing-wait verdicts are rate limits: a chain
    /// exhausted only by them snoozes instead of failing (docs/design.md §4.2).
    pub fn is_rate_limit(self) -> bool {
        matches!(
            self,
            Verdict::Account
                | Verdict::Route
                | Verdict::Provider
                | Verdict::Ambiguous
                | Verdict::BillingWait
        )
    }

    /// The verdict [`Verdict::as_str`] names; `None` for any other text (`ok`, say).
    pub fn parse(text: &str) -> Option<Verdict> {
        serde_json::from_value(serde_json::Value::from(text)).ok()
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Account => "account",
            Verdict::Route => "route",
            Verdict::Provider => "provider",
            Verdict::Ambiguous => "ambiguous",
            Verdict::Billing => "billing",
            Verdict::BillingWait => "billing_wait",
            Verdict::Auth => "auth",
            Verdict::Client => "client",
            Verdict::Gone => "gone",
            Verdict::Server => "server",
        }
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a rest closes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum RestScope {
    /// The whole shared quota: every route of the pool, for everyone.
    Pool(String),
    /// One route (all users); `pool` is its pool when it is a shared route.
    Route {
        pool: Option<String>,
        route_key: String,
    },
    /// Every route of one connection (`platform` or `conn_…`): billing or auth.
    Connection(String),
    /// Nothing to close.
    None,
}

impl RestScope {
    /// The longest rest this scope takes; 0 for [`RestScope::None`].
    pub fn cap_ms(&self) -> u64 {
        match self {
            RestScope::Pool(_) => POOL_REST_CAP_MS,
            RestScope::Route { .. } => ROUTE_REST_CAP_MS,
            RestScope::Connection(_) => CIRCUIT_MS,
            RestScope::None => 0,
        }
    }
}

/// `pool:<pool>`, `route:<route_key>`, `connection:<id>` or `none`, as `worker classify` prints it.
impl fmt::Display for RestScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RestScope::Pool(pool) => write!(f, "pool:{pool}"),
            RestScope::Route { route_key, .. } => write!(f, "route:{route_key}"),
            RestScope::Connection(id) => write!(f, "connection:{id}"),
            RestScope::None => f.write_str("none"),
        }
    }
}

/// How long a rest lasts, before clamping to [1 s, cap].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RestLength {
    /// A fixed length in ms, as the provider gave it.
    For(u64),
    /// A length in ms nobody gave (the default, a circuit's hour): when it ends, one call
    /// fleet-wide probes the scope before the others call (docs/design.md §3.3).
    Guess(u64),
    /// Until an epoch-ms moment (`X-RateLimit-Reset`), measured against Redis time when written.
    Until(u64),
    /// Until an epoch-ms moment past the scope's cap (a spent day's midnight, a dead route's
    /// hour), capped at [`LONG_REST_CAP_MS`]: nothing before then would be answered.
    Long(u64),
}

impl RestLength {
    /// The longest this rest of `scope` may be.
    pub fn cap_ms(self, scope: &RestScope) -> u64 {
        match (self, scope) {
            (_, RestScope::None) => 0,
            (RestLength::Long(_), _) => LONG_REST_CAP_MS,
            _ => scope.cap_ms(),
        }
    }

    /// `("for", ms)` or `("until", epoch ms)`: how the rest scripts take it.
    pub fn mode(self) -> (&'static str, u64) {
        match self {
            RestLength::For(ms) | RestLength::Guess(ms) => ("for", ms),
            RestLength::Until(at_ms) | RestLength::Long(at_ms) => ("until", at_ms),
        }
    }
}

/// The length a rest of `length` on `scope` gets when written at `now_ms`, clamped to
/// [1 s, its cap].
///
/// The rest script does the same against Redis time; this is for people (`worker classify`) and
/// tests. [`RestScope::None`] yields 0: there is nothing to rest.
pub fn rest_ms(length: RestLength, scope: &RestScope, now_ms: u64) -> u64 {
    let cap_ms = length.cap_ms(scope);
    if cap_ms < MIN_REST_MS {
        return 0;
    }
    let requested = match length.mode() {
        ("for", ms) => ms,
        (_, at_ms) => at_ms.saturating_sub(now_ms),
    };
    requested.clamp(MIN_REST_MS, cap_ms)
}

#[derive(Debug, Clone, PartialEq)]
pub struct Classification {
    pub verdict: Verdict,
    pub scope: RestScope,
    pub length: Option<RestLength>,
    /// For an ambiguous verdict on a shared route: record evidence against the pool.
    pub evidence: bool,
    /// The rule of docs/design.md §3 that matched (`"0:limit_source"`, `"1:x-ratelimit"`, …).
    pub rule: &'static str,
    /// The rest is a spent day's (until the day clock's midnight, or a rolling day's hint).
    pub day: bool,
    /// The retry hint in ms, when the response carried one (docs/design.md §3.4, any format).
    pub retry_hint_ms: Option<u64>,
    /// `X-RateLimit-Remaining` or `x-ratelimit-remaining-requests`.
    pub ratelimit_remaining: Option<i64>,
    /// `error.metadata.provider_name`, when set.
    pub provider_name: Option<String>,
}

impl Classification {
    /// The rest this classification writes, clamped as the rest script would clamp it at `now_ms`;
    /// 0 when it writes none.
    pub fn rest_ms(&self, now_ms: u64) -> u64 {
        match self.length {
            Some(length) => rest_ms(length, &self.scope, now_ms),
            None => 0,
        }
    }

    fn bare(verdict: Verdict, rule: &'static str) -> Self {
        Classification {
            verdict,
            scope: RestScope::None,
            length: None,
            evidence: false,
            rule,
            day: false,
            retry_hint_ms: None,
            ratelimit_remaining: None,
            provider_name: None,
        }
    }
}

/// Classify a failed call on `route`.
pub fn classify(error: &CallError, route: &Route, now_ms: u64) -> Classification {
    match error {
        CallError::Http {
            status,
            headers,
            body,
        } => classify_response(*status, headers, body, route, now_ms),
        CallError::Transport(_) => Classification::bare(Verdict::Server, "transport"),
        // Before any text (OpenRouter answers 200 early, so upstream refusals often arrive this
        // way) an error inside a 200 is read exactly as the HTTP answer its status would be
        // (docs/design.md §2.3); after text, the engine's mid-stream rule decides, and for the
        // chain it counts as a 5xx of that attempt.
        CallError::InBand { error, partial } if partial.is_empty() => {
            let body = serde_json::json!({ "error": error.error }).to_string();
            let c = classify_response(
                error.carried_status(),
                &Headers::new(),
                body.as_bytes(),
                route,
                now_ms,
            );
            Classification {
                rule: match c.rule {
                    "server" => "in_band",
                    rule => rule,
                },
                ..c
            }
        }
        CallError::InBand { error, .. } => Classification {
            provider_name: error
                .error
                .pointer("/metadata/provider_name")
                .and_then(Value::as_str)
                .map(str::to_string),
            ..Classification::bare(Verdict::Server, "in_band")
        },
    }
}

/// Classify an HTTP response by its parts.
pub fn classify_response(
    status: u16,
    headers: &Headers,
    body: &[u8],
    route: &Route,
    now_ms: u64,
) -> Classification {
    let signals = Signals::read(headers, body, now_ms);
    let decision = rules::decide(status, &signals, route, now_ms);
    Classification {
        verdict: decision.verdict,
        scope: decision.scope,
        length: decision.length,
        evidence: decision.evidence,
        rule: decision.rule,
        day: decision.day,
        retry_hint_ms: signals.hint.map(|h| h.ms),
        ratelimit_remaining: signals.ratelimit_remaining(),
        provider_name: signals.provider_name,
    }
}

/// The rate-limit headers an answer carries wherever they appear: the real ones first, then
/// OpenRouter's echo in `error.metadata.headers` (a proxy may strip the real ones).
pub fn answer_headers(headers: &Headers, body: &[u8]) -> Headers {
    Signals::read(headers, body, 0).headers
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rest_ms_clamps() {
        let pool = RestScope::Pool("p".into());
        assert_eq!(rest_ms(RestLength::For(10), &pool, 0), MIN_REST_MS);
        assert_eq!(
            rest_ms(RestLength::For(600_000), &pool, 0),
            POOL_REST_CAP_MS
        );
        assert_eq!(rest_ms(RestLength::Until(5_000), &pool, 9_000), MIN_REST_MS);
        assert_eq!(rest_ms(RestLength::Until(40_000), &pool, 9_000), 31_000);
        assert_eq!(rest_ms(RestLength::For(60_000), &RestScope::None, 0), 0);
        let day = 10 * 3_600_000;
        assert_eq!(rest_ms(RestLength::Long(day), &pool, 0), day);
        assert_eq!(
            rest_ms(RestLength::Long(40 * 3_600_000), &pool, 0),
            LONG_REST_CAP_MS
        );
    }
}
