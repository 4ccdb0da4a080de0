//! The verdicts and the rests they call for: who refused, which scope rests, for how long, and
//! the caps. The rules decide a verdict and `classify` answers with one; both read these, so they
//! live here, below both.

use serde::{Deserialize, Serialize};
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
/// The longest a rolling day's refusal rests (docs/design.md §3.2): its hint, but no more than a
/// day, whatever the hint says (a day's quota frees calls within a day of their use).
pub const ROLLING_DAY_CAP_MS: u64 = 24 * 3_600_000;
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
pub(super) const MIN_EPOCH_MS: u64 = 1_000_000_000_000;

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
