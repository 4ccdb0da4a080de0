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

use crate::day::{next_midnight_ms, parse_http_date_ms};
use crate::dialect::{DayClock, Dialect};
use crate::headers::Headers;
use crate::provider::CallError;
use crate::route::Route;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::fmt;

/// The shortest rest ever written: a rest "in the past" still closes for this long.
pub const MIN_REST_MS: u64 = 1_000;
/// The longest pool rest. A daily cap that resets hours away rests this long and is re-probed.
pub const POOL_REST_CAP_MS: u64 = 300_000;
/// The longest route rest.
pub const ROUTE_REST_CAP_MS: u64 = 300_000;
/// The longest rest of a spent day: a day and an hour, so a midnight in any zone is covered.
pub const DAY_REST_CAP_MS: u64 = 25 * 3_600_000;
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
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Account,
    Route,
    Provider,
    Ambiguous,
    Billing,
    Auth,
    Client,
    Server,
}

impl Verdict {
    /// Account, route, provider and ambiguous verdicts are rate limits: a chain exhausted only by
    /// them snoozes instead of failing (docs/design.md §4.2).
    pub fn is_rate_limit(self) -> bool {
        matches!(
            self,
            Verdict::Account | Verdict::Route | Verdict::Provider | Verdict::Ambiguous
        )
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Account => "account",
            Verdict::Route => "route",
            Verdict::Provider => "provider",
            Verdict::Ambiguous => "ambiguous",
            Verdict::Billing => "billing",
            Verdict::Auth => "auth",
            Verdict::Client => "client",
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
    /// A fixed length in ms.
    For(u64),
    /// Until an epoch-ms moment (`X-RateLimit-Reset`), measured against Redis time when written.
    Until(u64),
    /// A spent day: until the epoch-ms moment the day's quota returns, capped at
    /// [`DAY_REST_CAP_MS`] instead of the scope's cap (nothing before then would be answered).
    Day(u64),
}

impl RestLength {
    /// The longest this rest of `scope` may be.
    pub fn cap_ms(self, scope: &RestScope) -> u64 {
        match (self, scope) {
            (_, RestScope::None) => 0,
            (RestLength::Day(_), _) => DAY_REST_CAP_MS,
            _ => scope.cap_ms(),
        }
    }

    /// `("for", ms)` or `("until", epoch ms)`: how the rest scripts take it.
    pub fn mode(self) -> (&'static str, u64) {
        match self {
            RestLength::For(ms) => ("for", ms),
            RestLength::Until(at_ms) | RestLength::Day(at_ms) => ("until", at_ms),
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
    /// `Retry-After` (or `retry_after_seconds`) in ms, when the response carried one.
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
        // The engine applies the mid-stream rate-limit rule itself (docs/design.md §2.3); for the
        // chain any other error inside a 200 counts as a 5xx of that attempt.
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
    let decision = match status {
        402 | 429 => match &route.pool {
            Some(pool) => shared_rule(&signals, route, pool, now_ms),
            None => off_quota_rule(status, &signals, route, now_ms),
        },
        401 | 403 if signals.content_block => Decision::bare(Verdict::Client, "moderation"),
        401 | 403 => Decision::circuit(Verdict::Auth, route, "auth"),
        408 => Decision::bare(Verdict::Server, "server"),
        400..=499 => Decision::bare(Verdict::Client, "client"),
        // 5xx (524, 529 included) and anything a provider should never answer with.
        _ => Decision::bare(Verdict::Server, "server"),
    };
    Classification {
        verdict: decision.verdict,
        scope: decision.scope,
        length: decision.length,
        evidence: decision.evidence,
        rule: decision.rule,
        retry_hint_ms: signals.retry_hint_ms(),
        ratelimit_remaining: signals.ratelimit_remaining(),
        provider_name: signals.provider_name,
    }
}

/// The part of a classification a rule decides.
struct Decision {
    verdict: Verdict,
    scope: RestScope,
    length: Option<RestLength>,
    evidence: bool,
    rule: &'static str,
}

impl Decision {
    fn bare(verdict: Verdict, rule: &'static str) -> Self {
        Decision {
            verdict,
            scope: RestScope::None,
            length: None,
            evidence: false,
            rule,
        }
    }

    fn pool(pool: &str, route: &Route, s: &Signals, now_ms: u64, rule: &'static str) -> Self {
        Decision {
            verdict: Verdict::Account,
            scope: RestScope::Pool(pool.to_string()),
            length: Some(
                s.day_length(route, now_ms)
                    .unwrap_or_else(|| s.pool_length(now_ms)),
            ),
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
        Decision {
            verdict,
            scope: RestScope::Route {
                pool: route.pool.clone(),
                route_key: route.key(),
            },
            length: Some(
                s.day_length(route, now_ms)
                    .unwrap_or_else(|| s.route_length()),
            ),
            evidence: false,
            rule,
        }
    }

    fn circuit(verdict: Verdict, route: &Route, rule: &'static str) -> Self {
        Decision {
            verdict,
            scope: RestScope::Connection(route.connection_scope()),
            length: Some(RestLength::For(CIRCUIT_MS)),
            evidence: false,
            rule,
        }
    }
}

/// docs/design.md §3 table for a 402 or 429 on a shared route: the first rule that matches wins.
fn shared_rule(s: &Signals, route: &Route, pool: &str, now_ms: u64) -> Decision {
    match s
        .limit_source
        .as_deref()
        .map(|v| v.strip_prefix("openrouter_").unwrap_or(v))
    {
        Some("free_tier_per_minute" | "free_tier_daily" | "in_flight_budget") => {
            return Decision::pool(pool, route, s, now_ms, "0:limit_source");
        }
        Some("shared_capacity") => {
            return Decision::route(Verdict::Route, route, s, now_ms, "0:limit_source");
        }
        Some("upstream_provider_shared_pool") => {
            return Decision::route(Verdict::Provider, route, s, now_ms, "0:limit_source");
        }
        Some("credits") => return Decision::circuit(Verdict::Billing, route, "0:limit_source"),
        _ => {}
    }
    if s.per_model_cap {
        return Decision::route(Verdict::Route, route, s, now_ms, "0:high_demand");
    }
    // Only where the dialect says so: Groq's or OpenAI's `x-ratelimit-*` describe one model.
    if route.dialect.headers_are_pool_wide() && s.headers.any_with_prefix("x-ratelimit-") {
        return Decision::pool(pool, route, s, now_ms, "1:x-ratelimit");
    }
    if s.provider_marker {
        return Decision::route(Verdict::Provider, route, s, now_ms, "2:provider_marker");
    }
    if s.typed_rate_limit {
        return Decision::pool(pool, route, s, now_ms, "3:rate_limit_exceeded");
    }
    // Gemini's quota refusal is the key's quota for this model, which its pool is; the same
    // shape relayed by another provider says nothing about whose quota it was.
    if s.resource_exhausted && route.dialect == Dialect::Gemini {
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

/// Everything the rules read from one response. A body that is not JSON carries no signals.
#[derive(Default)]
struct Signals {
    /// Real headers first, then the `error.metadata.headers` echo.
    headers: Headers,
    limit_source: Option<String>,
    /// "High demand for … limited to N requests", or a `limit_rpm/` / `limit_rpd/` limiter id.
    per_model_cap: bool,
    provider_marker: bool,
    provider_name: Option<String>,
    /// `error_type` / `type` / string `code` = `rate_limit_exceeded`.
    typed_rate_limit: bool,
    /// Moderation (`reasons`, `flagged_input`, "requires moderation") or a guardrail (`patterns`).
    content_block: bool,
    /// `metadata.retry_after_seconds`, in ms.
    retry_after_seconds_ms: Option<u64>,
    /// `Retry-After`, delta-seconds or an HTTP-date, as ms from now.
    retry_after_ms: Option<u64>,
    /// The refusal names a per-day quota (message or a Google `quotaId`).
    says_per_day: bool,
    /// Google's `status: RESOURCE_EXHAUSTED`.
    resource_exhausted: bool,
}

impl Signals {
    fn read(headers: &Headers, body: &[u8], now_ms: u64) -> Signals {
        let mut signals = Signals {
            headers: headers.clone(),
            ..Signals::default()
        };
        signals.retry_after_ms = signals.headers.get("retry-after").and_then(|v| {
            parse_seconds_ms(v).or_else(|| Some(parse_http_date_ms(v)?.saturating_sub(now_ms)))
        });
        let Ok(root) = serde_json::from_slice::<Value>(body) else {
            return signals;
        };
        // Vertex-style bodies wrap the envelope in an array: `[{"error": …}]`.
        let root = match &root {
            Value::Array(items) => items.first().unwrap_or(&Value::Null),
            other => other,
        };
        let Some(error) = root.get("error") else {
            return signals;
        };
        let message = match error {
            Value::String(message) => message.as_str(),
            _ => error.get("message").and_then(Value::as_str).unwrap_or(""),
        };
        let empty = serde_json::Map::new();
        let metadata = error
            .get("metadata")
            .and_then(Value::as_object)
            .unwrap_or(&empty);

        if let Some(echo) = metadata.get("headers").and_then(Value::as_object) {
            for (name, value) in echo {
                match value {
                    Value::String(v) => signals.headers.push(name.as_str(), v.as_str()),
                    Value::Number(n) => signals.headers.push(name.as_str(), n.to_string()),
                    _ => {}
                }
            }
        }
        signals.limit_source = metadata
            .get("limit_source")
            .and_then(Value::as_str)
            .map(str::to_string);
        signals.per_model_cap = says_high_demand(message)
            || message.contains("limit_rpm/")
            || message.contains("limit_rpd/");
        let present = |key: &str| metadata.get(key).is_some_and(|v| !v.is_null());
        signals.provider_marker =
            present("provider_name") || present("raw") || present("provider_code");
        signals.provider_name = metadata
            .get("provider_name")
            .and_then(Value::as_str)
            .map(str::to_string);
        let typed = |v: Option<&Value>| v.and_then(Value::as_str) == Some("rate_limit_exceeded");
        signals.typed_rate_limit = typed(error.get("error_type"))
            || typed(metadata.get("error_type"))
            || typed(error.get("type"))
            || typed(error.get("code"));
        signals.resource_exhausted =
            error.get("status").and_then(Value::as_str) == Some("RESOURCE_EXHAUSTED");
        signals.says_per_day = says_per_day(message) || names_a_day_quota(error);
        signals.content_block = present("reasons")
            || present("flagged_input")
            || present("patterns")
            || message.contains("requires moderation");
        signals.retry_after_seconds_ms = metadata.get("retry_after_seconds").and_then(seconds_ms);
        signals
    }

    fn retry_after_ms(&self) -> Option<u64> {
        self.retry_after_ms
    }

    fn retry_hint_ms(&self) -> Option<u64> {
        self.retry_after_ms().or(self.retry_after_seconds_ms)
    }

    fn reset_ms(&self) -> Option<u64> {
        self.headers
            .get("x-ratelimit-reset")
            .and_then(|v| v.trim().parse::<u64>().ok())
            .filter(|&ms| ms >= MIN_EPOCH_MS)
    }

    fn ratelimit_remaining(&self) -> Option<i64> {
        let parse = |name: &str| {
            self.headers
                .get(name)
                .and_then(|v| v.trim().parse::<i64>().ok())
        };
        parse("x-ratelimit-remaining").or_else(|| parse("x-ratelimit-remaining-requests"))
    }

    /// Pool rest: `Retry-After`; else the reset moment when it is at most the cap away (a reset
    /// further off is a daily cap: rest the cap and look again); else the default.
    fn pool_length(&self, now_ms: u64) -> RestLength {
        if let Some(ms) = self.retry_after_ms() {
            return RestLength::For(ms);
        }
        match self.reset_ms() {
            Some(at) if at.saturating_sub(now_ms) > POOL_REST_CAP_MS => {
                RestLength::For(POOL_REST_CAP_MS)
            }
            Some(at) => RestLength::Until(at),
            None => RestLength::For(DEFAULT_REST_MS),
        }
    }

    /// The rest of a spent day (docs/design.md §3.4), when this is a day refusal: until the day
    /// clock's next midnight where the day is fixed, else for the hint (up to a day). OpenRouter's
    /// daily cap keeps its 300 s rest and re-probe for now.
    fn day_length(&self, route: &Route, now_ms: u64) -> Option<RestLength> {
        if route.dialect == Dialect::Openrouter {
            return None;
        }
        let hint = self.retry_hint_ms();
        let far = hint.is_some_and(|ms| ms > POOL_REST_CAP_MS);
        if !(self.says_per_day || far) {
            return None;
        }
        Some(match (route.day, hint) {
            (DayClock::Fixed(zone), _) => RestLength::Day(next_midnight_ms(zone, now_ms)),
            (DayClock::Rolling, Some(ms)) => RestLength::Day(now_ms.saturating_add(ms)),
            (DayClock::Rolling, None) => RestLength::Day(now_ms + DAY_REST_CAP_MS),
        })
    }

    /// Route rest: `Retry-After` / `retry_after_seconds`, else the reset moment, else the default.
    fn route_length(&self) -> RestLength {
        if let Some(ms) = self.retry_hint_ms() {
            return RestLength::For(ms);
        }
        match self.reset_ms() {
            Some(at) => RestLength::Until(at),
            None => RestLength::For(DEFAULT_REST_MS),
        }
    }
}

/// A message about a per-day quota: "per day", "per-day", Groq's "(RPD)" / "(TPD)".
fn says_per_day(message: &str) -> bool {
    let lower = message.to_ascii_lowercase();
    ["per day", "per-day", "(rpd)", "(tpd)"]
        .iter()
        .any(|needle| lower.contains(needle))
}

/// A Google error detail whose quota violation is a per-day quota
/// (`quotaId: "GenerateRequestsPerDayPerProjectPerModel-FreeTier"`).
fn names_a_day_quota(error: &Value) -> bool {
    let details = error.get("details").and_then(Value::as_array);
    details.into_iter().flatten().any(|detail| {
        let violations = detail.get("violations").and_then(Value::as_array);
        violations.into_iter().flatten().any(|v| {
            v.get("quotaId")
                .and_then(Value::as_str)
                .is_some_and(|id| id.contains("PerDay"))
        })
    })
}

/// "High demand for <model> … limited to <N> requests", without regard to case.
fn says_high_demand(message: &str) -> bool {
    let lower = message.to_ascii_lowercase();
    let Some(at) = lower.find("high demand for ") else {
        return false;
    };
    let after = &lower[at..];
    after.match_indices("limited to ").any(|(i, needle)| {
        let rest = &after[i + needle.len()..];
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        digits > 0 && rest[digits..].starts_with(" request")
    })
}

/// Delta-seconds (`"17"`, `"1.5"`) as whole ms, rounded up so a hint is never cut short.
fn parse_seconds_ms(text: &str) -> Option<u64> {
    seconds_to_ms(text.trim().parse::<f64>().ok()?)
}

/// A JSON number or numeric string of seconds, as ms.
fn seconds_ms(value: &Value) -> Option<u64> {
    match value {
        Value::Number(n) => n.as_f64().and_then(seconds_to_ms),
        Value::String(s) => parse_seconds_ms(s),
        _ => None,
    }
}

fn seconds_to_ms(seconds: f64) -> Option<u64> {
    if !seconds.is_finite() || seconds < 0.0 {
        return None;
    }
    let ms = seconds * 1000.0;
    // 16.007 s is 16007.000000000002 ms in binary floating point: that is 16007, not 16008.
    let nearest = ms.round();
    Some(if (ms - nearest).abs() < 1e-6 {
        nearest
    } else {
        ms.ceil()
    } as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn high_demand_needs_a_number_of_requests() {
        assert!(says_high_demand(
            "High demand for qwen/qwen3-coder:free on OpenRouter - limited to 8 requests per minute."
        ));
        assert!(!says_high_demand(
            "High demand for x - limited to many requests"
        ));
        assert!(!says_high_demand("limited to 8 requests per minute"));
    }

    #[test]
    fn seconds_round_up_to_ms() {
        assert_eq!(parse_seconds_ms("17"), Some(17_000));
        assert_eq!(parse_seconds_ms(" 1.0005 "), Some(1_001));
        assert_eq!(parse_seconds_ms("-1"), None);
        assert_eq!(parse_seconds_ms("Wed, 21 Oct 2015 07:28:00 GMT"), None);
        assert_eq!(seconds_ms(&serde_json::json!(16.007)), Some(16_007));
    }

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
        assert_eq!(rest_ms(RestLength::Day(day), &pool, 0), day);
        assert_eq!(
            rest_ms(RestLength::Day(40 * 3_600_000), &pool, 0),
            DAY_REST_CAP_MS
        );
    }
}
