//! Rests held in one process: [`MemoryRests`].
//!
//! Engine tests, the budget property test and benchmarks exercise the engine's rules, not Redis;
//! with this they need no server. It keeps the rules of [`super::Rests`] (extend only, clamps,
//! evidence corroboration, longest closure) on its own clock, and `tests/fleet/rests.rs` runs the same
//! suite on it and on [`super::RedisRests`] so the two cannot drift apart.

use super::{
    ActiveRest, Closure, EVIDENCE_REASON, FleetError, GUESS_MEMORY_MS, PROBE_MS, PROBING_REASON,
    Probe, RestKind, Rests, UNNAMED_RESTS, UNNAMED_RESTS_PER_USER, evidence_member, listed,
    longest, probing, scopes_closing, sort_listing,
};
use crate::classify::{
    EVIDENCE_MIN_ENTRIES, EVIDENCE_MIN_USERS, EVIDENCE_POOL_REST_MS, EVIDENCE_WINDOW_MS,
    MIN_REST_MS, POOL_REST_CAP_MS, RestLength, RestScope,
};
use crate::clock::{Clock, SystemClock};
use crate::route::Route;
use async_trait::async_trait;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};

/// Rests and evidence in a mutex, timed by a [`Clock`].
pub struct MemoryRests {
    clock: Arc<dyn Clock>,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Scope → (expiry in clock ms, reason).
    rests: HashMap<RestScope, (u64, String)>,
    /// Pool → evidence member → when it was recorded.
    evidence: HashMap<String, HashMap<String, u64>>,
    /// Scope → until when its guessed rest's end still calls for a probe.
    guesses: HashMap<RestScope, u64>,
    /// Scope → (until, owner) of the probe one call holds.
    probes: HashMap<RestScope, (u64, String)>,
    /// User → scope → expiry of the rests of routes no configuration names that their runs
    /// earned.
    unnamed: HashMap<String, HashMap<RestScope, u64>>,
    /// How many of those were dropped to keep their bounds.
    dropped: u64,
}

impl Default for MemoryRests {
    fn default() -> Self {
        MemoryRests::new(Arc::new(SystemClock))
    }
}

impl MemoryRests {
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        MemoryRests {
            clock,
            state: Mutex::new(State::default()),
        }
    }

    /// How many evidence entries against `pool` are inside the window.
    pub fn evidence(&self, pool: &str) -> usize {
        let now = self.clock.now_ms();
        self.lock().evidence.get(pool).map_or(0, |entries| {
            entries
                .values()
                .filter(|&&at| at.saturating_add(EVIDENCE_WINDOW_MS) >= now)
                .count()
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves plain maps behind: still consistent.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl State {
    /// `(remaining ms, reason)` of a rest in force at `now`.
    fn held(&self, scope: &RestScope, now: u64) -> Option<(u64, String)> {
        let (until, reason) = self.rests.get(scope)?;
        (*until > now).then(|| (until - now, reason.clone()))
    }

    /// Rest `scope` for `requested` ms, clamped to `[MIN_REST_MS, cap_ms]`, unless it already
    /// rests at least that long; returns the remaining ms after the write.
    fn extend(
        &mut self,
        scope: &RestScope,
        requested: i64,
        cap_ms: u64,
        reason: &str,
        now: u64,
    ) -> u64 {
        let requested = requested.clamp(MIN_REST_MS as i64, cap_ms as i64) as u64;
        if let Some((current, _)) = self.held(scope, now)
            && current >= requested
        {
            return current;
        }
        self.rests
            .insert(scope.clone(), (now + requested, reason.to_string()));
        requested
    }

    /// Count `scope`'s rest, in force until `until`, against `user`, and drop the
    /// shortest-lived such rests past [`UNNAMED_RESTS_PER_USER`] and [`UNNAMED_RESTS`].
    fn bound_unnamed(&mut self, user: &str, scope: &RestScope, until: u64, now: u64) {
        for held in self.unnamed.values_mut() {
            held.retain(|_, expiry| *expiry > now);
        }
        self.unnamed.retain(|_, held| !held.is_empty());
        let mine = self.unnamed.entry(user.to_string()).or_default();
        let expiry = mine.entry(scope.clone()).or_insert(until);
        *expiry = (*expiry).max(until);
        let mut drop = Vec::new();
        while mine.len() > UNNAMED_RESTS_PER_USER {
            let Some(shortest) = shortest(mine) else {
                break;
            };
            mine.remove(&shortest);
            drop.push(shortest);
        }
        let mut total: usize = self.unnamed.values().map(HashMap::len).sum();
        while total > UNNAMED_RESTS {
            let shortest = self
                .unnamed
                .iter()
                .filter_map(|(user, held)| Some((user.clone(), shortest(held)?)))
                .min_by_key(|(user, scope)| self.unnamed[user][scope]);
            let Some((user, scope)) = shortest else {
                break;
            };
            if let Some(held) = self.unnamed.get_mut(&user) {
                held.remove(&scope);
            }
            drop.push(scope);
            total -= 1;
        }
        for scope in drop {
            self.rests.remove(&scope);
            self.guesses.remove(&scope);
            self.dropped += 1;
        }
    }
}

/// The scope whose rest ends first.
fn shortest(held: &HashMap<RestScope, u64>) -> Option<RestScope> {
    held.iter()
        .min_by_key(|(_, expiry)| **expiry)
        .map(|(scope, _)| scope.clone())
}

#[async_trait]
impl Rests for MemoryRests {
    async fn write_unnamed(
        &self,
        scope: &RestScope,
        length: RestLength,
        reason: &str,
        user_id: &str,
    ) -> Result<u64, FleetError> {
        let remaining = self.write(scope, length, reason).await?;
        if *scope != RestScope::None {
            let now = self.clock.now_ms();
            let until = now + remaining;
            self.lock().bound_unnamed(user_id, scope, until, now);
        }
        Ok(remaining)
    }

    async fn dropped(&self) -> Result<u64, FleetError> {
        Ok(self.lock().dropped)
    }

    async fn write(
        &self,
        scope: &RestScope,
        length: RestLength,
        reason: &str,
    ) -> Result<u64, FleetError> {
        if *scope == RestScope::None {
            return Ok(0);
        }
        // The time is read under the lock: a writer that read it earlier but wrote later would
        // report a rest a little longer than the one it extended.
        let mut state = self.lock();
        let now = self.clock.now_ms();
        let requested = match length.mode() {
            ("for", ms) => ms as i64,
            (_, at_ms) => at_ms as i64 - now as i64,
        };
        let cap_ms = length.cap_ms(scope);
        let remaining = state.extend(scope, requested, cap_ms, reason, now);
        if matches!(length, RestLength::Guess(_)) {
            let until = now + remaining + GUESS_MEMORY_MS;
            state.guesses.insert(scope.clone(), until);
        }
        Ok(remaining)
    }

    async fn claim_probes(&self, route: &Route, owner: &str) -> Result<Probe, FleetError> {
        let now = self.clock.now_ms();
        let mut state = self.lock();
        let due: Vec<RestScope> = scopes_closing(route)
            .into_iter()
            .map(|(_, scope)| scope)
            .filter(|scope| {
                state.guesses.get(scope).is_some_and(|&until| until > now)
                    && state.held(scope, now).is_none()
            })
            .collect();
        if due.is_empty() {
            return Ok(Probe::NotDue);
        }
        for scope in due {
            match state.probes.get(&scope) {
                Some((until, holder)) if *until > now && holder != owner => {
                    return Ok(Probe::Held(probing(until - now)));
                }
                _ => {
                    state
                        .probes
                        .insert(scope, (now + PROBE_MS, owner.to_string()));
                }
            }
        }
        Ok(Probe::Claimed)
    }

    async fn probes_answered(
        &self,
        route: &Route,
        owner: &str,
        reopened: bool,
    ) -> Result<(), FleetError> {
        let mut state = self.lock();
        for (_, scope) in scopes_closing(route) {
            if state.probes.get(&scope).is_some_and(|(_, h)| h == owner) {
                state.probes.remove(&scope);
                if reopened {
                    state.guesses.remove(&scope);
                }
            }
        }
        Ok(())
    }

    async fn record_evidence(
        &self,
        pool: &str,
        user_id: &str,
        unique: &str,
    ) -> Result<Option<u64>, FleetError> {
        let now = self.clock.now_ms();
        let mut state = self.lock();
        let entries = state.evidence.entry(pool.to_string()).or_default();
        entries.insert(evidence_member(user_id, unique), now);
        entries.retain(|_, at| at.saturating_add(EVIDENCE_WINDOW_MS) >= now);
        let users: HashSet<&str> = entries
            .keys()
            .map(|m| m.rsplit_once(':').map_or(m.as_str(), |(user, _)| user))
            .collect();
        if (entries.len() as u64) < EVIDENCE_MIN_ENTRIES
            || (users.len() as u64) < EVIDENCE_MIN_USERS
        {
            return Ok(None);
        }
        let scope = RestScope::Pool(pool.to_string());
        let requested = EVIDENCE_POOL_REST_MS as i64;
        let remaining = state.extend(&scope, requested, POOL_REST_CAP_MS, EVIDENCE_REASON, now);
        // Nobody said how long the pool is closed: its end calls for a probe.
        state
            .guesses
            .insert(scope, now + remaining + GUESS_MEMORY_MS);
        Ok(Some(remaining))
    }

    async fn closures(&self, routes: &[Route]) -> Result<Vec<Option<Closure>>, FleetError> {
        let now = self.clock.now_ms();
        let state = self.lock();
        Ok(routes
            .iter()
            .map(|route| {
                let held: Vec<_> = scopes_closing(route)
                    .into_iter()
                    .flat_map(|(kind, scope)| {
                        let probe = state
                            .probes
                            .get(&scope)
                            .filter(|(until, _)| *until > now)
                            .map(|(until, _)| {
                                (
                                    probing(until - now).remaining_ms,
                                    PROBING_REASON.to_string(),
                                )
                            });
                        [(kind, state.held(&scope, now)), (RestKind::Route, probe)]
                    })
                    .collect();
                longest(held.iter().map(|(kind, h)| (*kind, h.as_ref())))
            })
            .collect())
    }

    async fn remaining(&self, scope: &RestScope) -> Result<Option<u64>, FleetError> {
        Ok(self
            .lock()
            .held(scope, self.clock.now_ms())
            .map(|(ms, _)| ms))
    }

    async fn list(&self) -> Result<Vec<ActiveRest>, FleetError> {
        let now = self.clock.now_ms();
        let mut state = self.lock();
        state.rests.retain(|_, (until, _)| *until > now);
        let mut active: Vec<ActiveRest> = state
            .rests
            .iter()
            .filter_map(|(scope, (until, reason))| {
                let (kind, key) = listed(scope)?;
                Some(ActiveRest::new(
                    kind,
                    key.to_string(),
                    until - now,
                    reason.clone(),
                ))
            })
            .collect();
        sort_listing(&mut active);
        Ok(active)
    }

    async fn clear(&self, scope: &str, key: &str) -> Result<bool, FleetError> {
        let now = self.clock.now_ms();
        let mut state = self.lock();
        let mut removed = false;
        state.rests.retain(|held, (until, _)| {
            let named =
                listed(held).is_some_and(|(kind, k)| kind.scope_name() == scope && k == key);
            removed |= named && *until > now;
            !named
        });
        if scope == "pool" {
            state.evidence.remove(key);
        }
        tracing::info!(scope, key, removed, "operator cleared a rest");
        Ok(removed)
    }
}
