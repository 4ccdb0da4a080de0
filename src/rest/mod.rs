//! Rests (docs/design.md §3 "Rest semantics"): pool rests, route rests, connection circuits and
//! ambiguous evidence, shared by every replica.
//!
//! A rest is what stops the fleet from spending calls into a quota that is already closed. Its
//! rules, whatever holds it: a write only ever extends a rest (concurrent writers keep the
//! longest), clamped to [1 s, the scope's cap]; ambiguous evidence rests the pool once enough
//! failures from enough users fall inside the window, and recording one failure twice counts
//! once; a route is closed by the longest of its pool's rest, its connection's circuit and its
//! own rest. The only way to shorten a rest is [`Rests::clear`], the operator's explicit clear.
//! When a rest whose length was a guess ends, one call fleet-wide probes it before the others
//! call ([`Rests::claim_probes`]).
//!
//! [`RedisRests`] is the fleet's: Redis keys with TTLs, written by Lua scripts on Redis time.
//! [`MemoryRests`] keeps the same rules in one process, for tests and benchmarks that need no
//! server; `tests/fleet/rests.rs` runs one suite on both.

mod memory;
mod redis;

pub use self::redis::RedisRests;
pub use memory::MemoryRests;

use crate::classify::{POOL_REST_CAP_MS, RestLength, RestScope};
use crate::error::FleetError;
use crate::route::Route;
use async_trait::async_trait;

/// The reason stored with a pool rest that corroborated evidence called for.
const EVIDENCE_REASON: &str = "ambiguous rate limits from several users";

/// The most rests on routes no configuration names (docs/design.md §3.3) that one user's
/// requests hold: past it, that user's shortest-lived such rest is dropped.
pub const UNNAMED_RESTS_PER_USER: usize = 20;
/// The most rests on routes no configuration names, all users together: past it, the
/// shortest-lived such rest is dropped.
pub const UNNAMED_RESTS: usize = 1_000;

/// The longest a claimed probe closes its scope to everyone else: its call answers sooner.
pub const PROBE_MS: u64 = 120_000;
/// How long after a guessed rest ends its probe is still due.
const GUESS_MEMORY_MS: u64 = 600_000;
/// Runs that find a scope being probed look again this soon, not when the probe would lapse.
const PROBING_CLOSURE_MS: u64 = 2_000;
const PROBING_REASON: &str = "probing: one call checks whether it reopened";

/// Whether a call on a route may go ahead as far as probes are concerned (docs/design.md §3.3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Probe {
    /// No scope of the route is waiting for a probe.
    NotDue,
    /// This call is the fleet's probe of the route's scopes whose guessed rest ended.
    Claimed,
    /// Another call is probing: the route is closed until it answers.
    Held(Closure),
}

/// The closure a probe held by another call makes: short, so waiting runs look again soon after
/// it answers.
fn probing(remaining_ms: u64) -> Closure {
    Closure {
        kind: RestKind::Route,
        remaining_ms: remaining_ms.clamp(1, PROBING_CLOSURE_MS),
        reason: PROBING_REASON.to_string(),
    }
}

/// What kind of rest closes a route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RestKind {
    Pool,
    Route,
    Circuit,
    /// Not a rest: the pool's limiter has no slot before then (docs/design.md §4.4).
    Pace,
    /// Not a rest: a priced route this run may not pay for, its spend cap (or its tenant's)
    /// being reached (docs/design.md §4.8). A run never waits for it.
    SpendCap,
}

impl RestKind {
    /// The scope name `list`, `clear` and `DELETE /v1/rests/{scope}/{key}` use.
    pub fn scope_name(self) -> &'static str {
        match self {
            RestKind::Pool => "pool",
            RestKind::Route => "route",
            RestKind::Circuit => "connection",
            RestKind::Pace => "pace",
            RestKind::SpendCap => "spend",
        }
    }
}

/// Why a route is closed right now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Closure {
    pub kind: RestKind,
    pub remaining_ms: u64,
    pub reason: String,
}

impl Closure {
    /// A closure that never ends: a route this run must not try again, whatever Redis says.
    pub fn forever(reason: &str) -> Closure {
        Closure {
            kind: RestKind::Route,
            remaining_ms: u64::MAX,
            reason: reason.to_string(),
        }
    }
}

/// How the reason of an operator's pause starts: a pause is a rest like any other, and the
/// reason is what tells it apart (for the board's Resume, and for a delayed run's words).
pub const PAUSE_REASON: &str = "paused by the operator: ";

/// An active rest, as `GET /v1/rests` and the board list them.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ActiveRest {
    /// `pool`, `route` or `connection`.
    pub scope: String,
    pub key: String,
    pub remaining_ms: u64,
    pub reason: String,
    /// An operator's pause, which a resume ends, rather than a refusal's rest.
    pub paused: bool,
}

impl ActiveRest {
    pub fn new(kind: RestKind, key: String, remaining_ms: u64, reason: String) -> ActiveRest {
        ActiveRest {
            scope: kind.scope_name().to_string(),
            key,
            remaining_ms,
            paused: reason.starts_with(PAUSE_REASON),
            reason,
        }
    }

    /// The reason of a pause for `why`.
    pub fn pause_reason(why: &str) -> String {
        format!("{PAUSE_REASON}{why}")
    }

    /// Whether this rest closes a pool for a spent day: only a day refusal rests a pool past
    /// the pool cap (docs/design.md §3.2). An operator's pause is as long, but it is theirs,
    /// and only their resume ends it: never a spent day, whatever the quota endpoint says.
    pub fn is_day_rest(&self) -> bool {
        self.scope == RestKind::Pool.scope_name()
            && self.remaining_ms > POOL_REST_CAP_MS
            && !self.paused
    }
}

/// The rests every replica consults before a call and writes after a refusal.
#[async_trait]
pub trait Rests: Send + Sync {
    /// Extend (never shorten) the rest of `scope`; returns the remaining ms after the write.
    async fn write(
        &self,
        scope: &RestScope,
        length: RestLength,
        reason: &str,
    ) -> Result<u64, FleetError>;

    /// [`Rests::write`] of the rest of a route no configuration names (a model only requests
    /// name, or a user's own connection), on behalf of the user whose run earned it. A user can
    /// make such routes without end, so their rests are bounded: at most
    /// [`UNNAMED_RESTS_PER_USER`] a user and [`UNNAMED_RESTS`] in all, the shortest-lived dropped
    /// first to make room (a run on a dropped route calls once more and rests it again). A
    /// configured route's rest is never dropped.
    async fn write_unnamed(
        &self,
        scope: &RestScope,
        length: RestLength,
        reason: &str,
        user_id: &str,
    ) -> Result<u64, FleetError>;

    /// How many rests [`Rests::write_unnamed`] has dropped to keep its bounds, fleet-wide.
    async fn dropped(&self) -> Result<u64, FleetError>;

    /// Record ambiguous evidence against `pool`; returns the pool rest's remaining ms when the
    /// evidence is corroborated and the pool now rests.
    ///
    /// `unique` names this failure (e.g. the run and attempt); recording the same one twice counts
    /// once, so a redelivered job cannot corroborate itself.
    async fn record_evidence(
        &self,
        pool: &str,
        user_id: &str,
        unique: &str,
    ) -> Result<Option<u64>, FleetError>;

    /// For each route, `None` when open or the longest closure that applies: its route rest, its
    /// pool's rest (shared routes) and its connection's circuit. One round trip for the chain.
    async fn closures(&self, routes: &[Route]) -> Result<Vec<Option<Closure>>, FleetError>;

    /// The remaining ms of `scope`'s own rest, if it rests.
    async fn remaining(&self, scope: &RestScope) -> Result<Option<u64>, FleetError>;

    /// Every active rest and circuit, sorted by scope and key.
    async fn list(&self) -> Result<Vec<ActiveRest>, FleetError>;

    /// docs/design.md §3.3, one probe per fleet: before a call on `route`, claim the probe of
    /// each of its scopes whose rest was a guess and has ended. `owner` names this call.
    async fn claim_probes(&self, route: &Route, owner: &str) -> Result<Probe, FleetError>;

    /// The call that claimed `route`'s probes answered: when `reopened` (it succeeded) the
    /// scopes are open to every run again; otherwise the probes are released, and the rest its
    /// failure wrote, if any, closes the route.
    async fn probes_answered(
        &self,
        route: &Route,
        owner: &str,
        reopened: bool,
    ) -> Result<(), FleetError>;

    /// The operator's clear: the only way to shorten a rest. `scope` and `key` are as
    /// [`Rests::list`] shows them (`pool`/`route`/`connection`); returns whether a rest was
    /// removed. Clearing a pool also drops its evidence, so old evidence cannot close it again
    /// at once; clearing a route clears it under every pool. An unknown scope removes nothing.
    async fn clear(&self, scope: &str, key: &str) -> Result<bool, FleetError>;
}

/// The rests that can close `route`, in the order that wins a tie: the pool first, as it says
/// most, then the connection's circuit, then the route's own rest.
fn scopes_closing(route: &Route) -> Vec<(RestKind, RestScope)> {
    let mut scopes = Vec::with_capacity(3);
    if let Some(pool) = &route.pool {
        scopes.push((RestKind::Pool, RestScope::Pool(pool.clone())));
    }
    scopes.push((
        RestKind::Circuit,
        RestScope::Connection(route.connection_scope()),
    ));
    scopes.push((
        RestKind::Route,
        RestScope::Route {
            pool: route.pool.clone(),
            route_key: route.key(),
        },
    ));
    scopes
}

/// The longest of the rests in force (`(remaining ms, reason)`), the first one on a tie.
fn longest<'a>(
    held: impl IntoIterator<Item = (RestKind, Option<&'a (u64, String)>)>,
) -> Option<Closure> {
    let mut best: Option<Closure> = None;
    for (kind, state) in held {
        if let Some((remaining_ms, reason)) = state
            && best.as_ref().is_none_or(|b| *remaining_ms > b.remaining_ms)
        {
            best = Some(Closure {
                kind,
                remaining_ms: *remaining_ms,
                reason: reason.clone(),
            });
        }
    }
    best
}

/// The kind and listed key (`pool` name, route key, connection) of a rest scope.
fn listed(scope: &RestScope) -> Option<(RestKind, &str)> {
    match scope {
        RestScope::Pool(pool) => Some((RestKind::Pool, pool)),
        RestScope::Route { route_key, .. } => Some((RestKind::Route, route_key)),
        RestScope::Connection(id) => Some((RestKind::Circuit, id)),
        RestScope::None => None,
    }
}

/// The evidence member of one failure: the user is read back as everything before its last ':'.
fn evidence_member(user_id: &str, unique: &str) -> String {
    format!("{user_id}:{}", unique.replace(':', "_"))
}

fn sort_listing(active: &mut [ActiveRest]) {
    active.sort_by(|a, b| (&a.scope, &a.key).cmp(&(&b.scope, &b.key)));
}
