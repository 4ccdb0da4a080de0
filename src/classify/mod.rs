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
//! (`hints`) and the limits it states (`limits`), then the rules decide (`rules`) one of the
//! verdicts of `verdict`.

mod hints;
mod limits;
mod rules;

pub use hints::{duration_ms, headroom_reset_ms};
pub use limits::{MAX_STATED, RefusalLimits};
mod signals;
mod verdict;

pub use verdict::{
    CIRCUIT_MS, DEFAULT_REST_MS, EVIDENCE_MIN_ENTRIES, EVIDENCE_MIN_USERS, EVIDENCE_POOL_REST_MS,
    EVIDENCE_WINDOW_MS, GONE_REST_MS, LONG_REST_CAP_MS, MIN_REST_MS, POOL_REST_CAP_MS,
    ROLLING_DAY_CAP_MS, ROUTE_REST_CAP_MS, RestLength, RestScope, Verdict, rest_ms,
};

use crate::headers::Headers;
use crate::provider::CallError;
use crate::route::Route;
use serde_json::Value;
use signals::Signals;

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
    /// The retry hint in ms, when the response carried one (docs/design.md §3.2, any format).
    pub retry_hint_ms: Option<u64>,
    /// `X-RateLimit-Remaining` or `x-ratelimit-remaining-requests`.
    pub ratelimit_remaining: Option<i64>,
    /// `error.metadata.provider_name`, when set.
    pub provider_name: Option<String>,
    /// The limits the body states (docs/design.md §4.4): learned by the pool, when the
    /// refusal is its quota's.
    pub stated: RefusalLimits,
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
            stated: RefusalLimits::default(),
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
        stated: signals.stated,
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
