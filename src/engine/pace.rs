//! The engine's side of pacing (docs/design.md §4.2, §4.4, §4.7): a pool with no slot closes its
//! routes without a call, a call on a paced route takes a slot first, a run that must wait for
//! a slot takes its place in the pool's queue, where slots go to tenants by weight, and is
//! woken when one is granted to it (it leaves the queue when it goes elsewhere), what the
//! provider states in an answer is learned, and a refusal despite the slot is a pacing miss.

use super::{Engine, EngineError, Run};
use crate::classify::{Classification, RestScope, Verdict};
use crate::error::FleetError;
use crate::events::Event;
use crate::job::{HeldSlot, Priority};
use crate::pace::{Answer, Joined, Lane, Pacer, Slot, Stated, WINDOW_GUARD_MS, Waiter};
use crate::preflight::Preflight;
use crate::provider::{CallError, Completion};
use crate::rest::{Closure, RestKind};
use crate::route::Route;

/// How a call on a route got its slot.
pub(crate) enum Taken {
    /// The route's pool is not paced.
    Unpaced,
    /// The run's held slot (counted when it was reserved).
    Held,
    /// Counted now (engine clock ms).
    Admitted { at_ms: u64 },
    /// The pool has no slot before the closure ends: no call is made.
    Full(Closure),
}

/// The most slots one pool's queue hands out in one round of [`Engine::dispatch_turns`].
const DISPATCH_MAX: u32 = 256;

/// A pool whose queue is empty leaves the list of pools with runs waiting after this long
/// without a run joining it.
const QUIET_MS: u64 = 60_000;

/// How far this process's clock may be from the limiter's when it guesses that a slot was
/// taken near a window's end.
const LIMITER_SKEW_MS: u64 = 1_000;

/// A held slot's wake-up is spread over this much after the slot's moment, so that a window's
/// worth of waiting runs does not land in one instant.
const SLOT_JITTER_MS: (u64, u64) = (0, 250);

impl Engine {
    /// Hand out the room of every pool with runs waiting their turn (docs/design.md §4.7) and
    /// return the runs granted a slot since the last round, to be woken. Every replica may run
    /// it at once: the limiter grants each slot once and names each run once.
    pub async fn dispatch_turns(&self) -> Result<Vec<String>, EngineError> {
        let mut granted = Vec::new();
        for pool in self.fleet.pace.waiting_pools().await? {
            let Some((limits, day)) = self.catalog.instance(&pool) else {
                // A pool the configuration no longer has: nobody can be handed its slots.
                self.fleet.pace.quiet(&pool, 0).await?;
                continue;
            };
            let day_end = day.day_end_ms(self.clock.now_ms());
            let round = self
                .fleet
                .pace
                .dispatch(&pool, &limits, day_end, DISPATCH_MAX)
                .await?;
            if round.waiting == 0 {
                self.fleet.pace.quiet(&pool, QUIET_MS).await?;
            }
            if !round.granted.is_empty() {
                tracing::debug!(pool = %pool, granted = round.granted.len(), waiting = round.waiting, "handed out slots to runs waiting their turn");
            }
            granted.extend(round.granted);
        }
        Ok(granted)
    }

    /// The run as a pool's queue sees it: its tenant, its tier's weight, its lane. A
    /// continuation tries once and is never paced out: it asks as nobody.
    pub(crate) fn waiter<'r>(&self, run: &'r Run<'_>) -> Option<Waiter<'r>> {
        if run.job.is_continuation() {
            return None;
        }
        let request = &run.job.request;
        let weight = self
            .catalog
            .tier(request.tier_name())
            .map_or(1, |t| t.weight);
        Some(Waiter {
            run_id: &run.job.run_id,
            tenant: request.tenant_id(),
            weight,
            lane: match request.priority() {
                Priority::Interactive => Lane::Interactive,
                Priority::Batch => Lane::Batch,
            },
            deadline_ms: run.job.deadline_ms,
        })
    }

    /// Close each open route of `routes` whose pool has no slot for this run now; a slot this
    /// run holds keeps its pool open.
    pub(crate) async fn pace_closures(
        &self,
        run: &Run<'_>,
        routes: &[Route],
        closures: &mut [Option<Closure>],
    ) -> Result<(), EngineError> {
        let now = self.clock.now_ms();
        let held = run.slot.as_ref().filter(|s| s.usable(&s.pool, now));
        let held = held.map(|s| s.pool.as_str());
        let pace = &*self.fleet.pace;
        let who = self.waiter(run);
        close_full_pools(pace, routes, closures, run.tokens, now, held, who.as_ref()).await?;
        Ok(())
    }

    /// Before a call on `route`: take a slot of its pool (the one granted to the run, when it
    /// waited its turn). A continuation tries once and is never paced out: it is counted when
    /// there is room.
    pub(crate) async fn take_slot(
        &self,
        run: &mut Run<'_>,
        route: &Route,
    ) -> Result<Taken, EngineError> {
        let now = self.clock.now_ms();
        if let Some(pool) = &route.pool
            && run.slot.as_ref().is_some_and(|s| s.usable(pool, now))
        {
            run.slot = None;
            return Ok(Taken::Held);
        }
        // A slot held elsewhere (a later pool's, or one not yet due) is not this call's: it goes
        // back at once, before the window it was counted in comes. A place in this pool's queue
        // stays: the slot granted to it is what the run asks for.
        let queued_here = route
            .pool
            .as_deref()
            .is_some_and(|pool| run.slot.as_ref().is_some_and(|s| s.queued_in(pool)));
        if !queued_here {
            self.release_slot(run).await?;
        }
        let (Some(pool), Some(limits)) = (&route.pool, &route.pace) else {
            return Ok(Taken::Unpaced);
        };
        let who = self.waiter(run);
        let slot = self
            .fleet
            .pace
            .admit_as(pool, limits, self.day_end(route), run.tokens, who.as_ref())
            .await?;
        match full(pool, slot) {
            Some(closure) if who.is_some() => Ok(Taken::Full(closure)),
            _ => {
                if queued_here {
                    // Its turn came: the queue gave it the slot, and its place with it.
                    run.slot = None;
                }
                Ok(Taken::Admitted { at_ms: now })
            }
        }
    }

    /// After the call of a slot taken at `at_ms`: a slot taken at the very end of a fixed
    /// window was counted in the next window too; an answer back before that window began
    /// gives it back. Asked only near a window's end (by this clock, with a second to spare for
    /// the limiter's), so most calls cost nothing more.
    pub(crate) async fn slot_used(
        &self,
        route: &Route,
        at_ms: u64,
        tokens: u32,
    ) -> Result<(), EngineError> {
        let (Some(pool), Some(limits)) = (&route.pool, &route.pace) else {
            return Ok(());
        };
        let win = limits.window_ms.max(1);
        let near_end = win - at_ms % win <= WINDOW_GUARD_MS + LIMITER_SKEW_MS;
        if limits.rolling || !near_end {
            return Ok(());
        }
        let elapsed = self.clock.now_ms().saturating_sub(at_ms);
        self.fleet
            .pace
            .landed(pool, limits, elapsed, tokens)
            .await?;
        Ok(())
    }

    /// A wait for a pool's next slot holds one: a full pool's queue gives the run its place
    /// (or a slot at once) and wakes it when its turn comes; a paced pool's rest reserves the
    /// first slot with room after it, when nobody waits their turn. Either way the run does
    /// not wake with every other waiting run at the window's start. Any other decision is
    /// returned as it is.
    pub(crate) async fn hold_slot(
        &self,
        run: &mut Run<'_>,
        routes: &[Route],
        closures: &[Option<Closure>],
        decided: Preflight,
    ) -> Result<Preflight, EngineError> {
        let Preflight::Wait { until_ms, reason } = decided else {
            return Ok(decided);
        };
        let earliest = closures
            .iter()
            .enumerate()
            .filter_map(|(i, c)| c.as_ref().map(|c| (i, c)))
            .min_by_key(|(_, c)| c.remaining_ms);
        // A full pool's wait, and a paced pool's rest (its end is the window's, when the
        // provider said where that is), end with a slot of the pool's limiter: the run wakes at
        // it, not with every other run of the pool at the reopening plus a snooze's jitter.
        let paced = earliest.filter(|(i, c)| match c.kind {
            RestKind::Pace => true,
            RestKind::Pool => routes[*i].pace.is_some(),
            RestKind::Route | RestKind::Circuit | RestKind::SpendCap => false,
        });
        let Some((i, closure)) = paced else {
            return Ok(Preflight::Wait { until_ms, reason });
        };
        let now = self.clock.now_ms();
        if closure.kind == RestKind::Pace
            && let Some(who) = self.waiter(run)
        {
            // A full pool: the run takes its place in the pool's queue, and is woken when its
            // turn comes (or at about then, should nobody wake it).
            let route = &routes[i];
            let (Some(pool), Some(limits)) = (&route.pool, &route.pace) else {
                return Ok(Preflight::Wait { until_ms, reason });
            };
            let joined = self
                .fleet
                .pace
                .join(pool, limits, self.day_end(route), run.tokens, &who)
                .await?;
            let jitter = self.clock.jitter_ms(SLOT_JITTER_MS.0, SLOT_JITTER_MS.1);
            let (wake_ms, valid_ms, reason) = match joined {
                Joined::DaySpent { .. } => return Ok(Preflight::Wait { until_ms, reason }),
                Joined::Granted { valid_ms } => {
                    (now + jitter, valid_ms, format!("holding a slot of {pool}"))
                }
                Joined::Queued { wait_ms } => (
                    now + wait_ms + jitter,
                    wait_ms + limits.window_ms,
                    format!("fair share: waiting its turn for a slot of {pool}"),
                ),
            };
            if !run.slot.as_ref().is_some_and(|s| s.queued_in(pool)) {
                self.release_slot(run).await?;
            }
            run.slot = Some(HeldSlot {
                pool: pool.clone(),
                from_ms: wake_ms,
                until_ms: now + valid_ms,
                queued: true,
            });
            if wake_ms >= run.job.deadline_ms {
                self.release_slot(run).await?;
                return Ok(Preflight::Wait { until_ms, reason });
            }
            return Ok(Preflight::Wait {
                until_ms: wake_ms,
                reason,
            });
        }
        let reopens_ms = now.saturating_add(closure.remaining_ms);
        let pool = routes[i].pool.as_deref();
        let already = run.slot.as_ref().filter(|s| {
            Some(s.pool.as_str()) == pool && s.from_ms >= reopens_ms && s.until_ms > now
        });
        let held = match already {
            // Woken before its slot (a "run now", a redelivery): the run keeps the slot it
            // holds rather than queueing behind every slot taken since.
            Some(held) => held.clone(),
            None => {
                self.release_slot(run).await?;
                let Some(held) = self.reserve_slot(&routes[i], run.tokens).await? else {
                    return Ok(Preflight::Wait { until_ms, reason });
                };
                run.slot = Some(held.clone());
                held
            }
        };
        // A slot before the rest ends, or past the run's deadline, is no use to it: the slot goes
        // back and the decision stands.
        if (closure.kind == RestKind::Pool && held.from_ms < reopens_ms)
            || held.from_ms >= run.job.deadline_ms
        {
            self.release_slot(run).await?;
            return Ok(Preflight::Wait { until_ms, reason });
        }
        let (from_ms, wait_ms) = (
            held.from_ms,
            held.from_ms.saturating_sub(self.clock.now_ms()),
        );
        let pool = held.pool.clone();
        let jitter = self.clock.jitter_ms(SLOT_JITTER_MS.0, SLOT_JITTER_MS.1);
        Ok(Preflight::Wait {
            until_ms: from_ms + jitter,
            reason: format!("holding a slot of {pool} in {wait_ms} ms"),
        })
    }

    /// docs/design.md §2.2 (`wait_for_free_s`): the first untried route before `before` that a
    /// full pool closes for no longer than the job allows is waited for in place, holding a
    /// slot, instead of being skipped for a later route. Returns the route waited for.
    pub(crate) async fn wait_in_place(
        &self,
        run: &mut Run<'_>,
        closures: &[Option<Closure>],
        tried: &[bool],
        before: usize,
    ) -> Result<Option<usize>, EngineError> {
        let allowed_ms = u64::from(run.job.request.wait_for_free_s.unwrap_or(0)) * 1000;
        if allowed_ms == 0 {
            return Ok(None);
        }
        let routes = run.routes;
        let candidate = (0..before).find(|&i| !tried[i] && closures[i].is_some());
        let Some(i) = candidate.filter(|&i| {
            closures[i]
                .as_ref()
                .is_some_and(|c| c.kind == RestKind::Pace && c.remaining_ms <= allowed_ms)
        }) else {
            return Ok(None);
        };
        let Some(held) = self.reserve_slot(&routes[i], run.tokens).await? else {
            return Ok(None);
        };
        let wait_ms = held.from_ms.saturating_sub(self.clock.now_ms());
        let pool = held.pool.clone();
        self.keep_slot(run, held).await?;
        if wait_ms > allowed_ms {
            // Others hold the earlier slots: the run moves on, keeping this one should it come
            // to wait after all.
            return Ok(None);
        }
        tracing::info!(pool = %pool, wait_ms, "waiting in place for the pool's next slot");
        let waiting = Event::Waiting {
            until_ms: self.clock.now_ms() + wait_ms,
            reason: format!("{pool} is full: waiting for its next slot"),
        };
        self.publish(run, waiting).await?;
        self.clock
            .sleep(std::time::Duration::from_millis(wait_ms))
            .await;
        Ok(Some(i))
    }

    /// Hold `held` for the run, giving back any slot it held before.
    async fn keep_slot(&self, run: &mut Run<'_>, held: HeldSlot) -> Result<(), EngineError> {
        self.release_slot(run).await?;
        run.slot = Some(held);
        Ok(())
    }

    /// Give back the slot the run holds, if it holds one: it will not call in it (it went to
    /// another route, ended, or waits past the slot). Its window and its day count it no more,
    /// so the slot goes to another run instead of closing the pool a call early.
    pub(crate) async fn release_slot(&self, run: &mut Run<'_>) -> Result<(), EngineError> {
        let Some(held) = run.slot.take() else {
            return Ok(());
        };
        let now = self.clock.now_ms();
        let run_id = &run.job.run_id;
        give_back(
            &*self.fleet.pace,
            run.routes,
            &held,
            run_id,
            run.tokens,
            now,
        )
        .await?;
        Ok(())
    }

    /// Count a slot of `route`'s pool in its first window with room, for this run to call in;
    /// `None` when the pool is not paced or its day is spent.
    async fn reserve_slot(
        &self,
        route: &Route,
        tokens: u32,
    ) -> Result<Option<HeldSlot>, EngineError> {
        let (Some(pool), Some(limits)) = (&route.pool, &route.pace) else {
            return Ok(None);
        };
        let held = self
            .fleet
            .pace
            .reserve(pool, limits, self.day_end(route), tokens)
            .await?;
        let now = self.clock.now_ms();
        Ok(held.map(|held| HeldSlot {
            pool: pool.clone(),
            from_ms: now + held.wait_ms,
            until_ms: now + held.valid_ms,
            queued: false,
        }))
    }

    /// After a call on a route whose pool counts tokens: the answer's usage replaces the
    /// estimate the call was admitted with (`spent`: `None` when unknown, as after a broken
    /// stream; `Some(0)` for a refusal, which spent none).
    pub(crate) async fn tokens_spent(
        &self,
        route: &Route,
        estimate: u32,
        spent: Option<u64>,
    ) -> Result<(), EngineError> {
        // A pool that counts no tokens ignores the correction without a round trip.
        let (Some(pool), Some(limits), Some(spent)) = (&route.pool, &route.pace, spent) else {
            return Ok(());
        };
        let delta = i64::try_from(spent).unwrap_or(i64::MAX) - i64::from(estimate);
        self.fleet
            .pace
            .spent(pool, limits, self.day_end(route), delta)
            .await?;
        Ok(())
    }

    /// What a served answer's headers state about the route's pool, learned by its limiter.
    pub(crate) async fn learn_served(
        &self,
        route: &Route,
        c: &Completion,
    ) -> Result<(), EngineError> {
        let Some(limits) = &route.pace else {
            return Ok(());
        };
        let stated = Stated::read(
            route.dialect,
            &c.limit_headers,
            Answer::Served,
            limits.window_ms,
            self.clock.now_ms(),
        );
        self.learn(route, &stated).await
    }

    /// A refusal for the pool's quota (docs/design.md §4.4): what it states is learned (its
    /// limit, where its window ends, a spent day), and a refusal of a call the limiter let
    /// through is a pacing miss, which lowers the pool's working limit when the refusal did not
    /// state the limit itself. A day refusal of a pool that declares no day limit teaches that
    /// limit; it is no miss.
    pub(crate) async fn pool_refused(
        &self,
        route: &Route,
        error: &CallError,
        class: &Classification,
    ) -> Result<(), EngineError> {
        let (Some(pool), Some(limits)) = (&route.pool, &route.pace) else {
            return Ok(());
        };
        if class.verdict != Verdict::Account || !matches!(class.scope, RestScope::Pool(_)) {
            return Ok(());
        }
        let headers = match error {
            CallError::Http { headers, body, .. } => crate::classify::answer_headers(headers, body),
            _ => crate::headers::Headers::new(),
        };
        let answer = match class.day {
            true => Answer::DayRefusal,
            false => Answer::WindowRefusal {
                hint_ms: class.retry_hint_ms,
            },
        };
        let stated = Stated::read(
            route.dialect,
            &headers,
            answer,
            limits.window_ms,
            self.clock.now_ms(),
        )
        .with_refusal(&class.stated, limits.window_ms);
        self.learn(route, &stated).await?;
        if class.day {
            if limits.per_day.is_none() {
                tracing::info!(pool = %pool, "the provider refused the pool's day: its day limit is learned from what was counted");
                return Ok(());
            }
            let misses = self.fleet.pace.missed(pool, limits, None, false).await?;
            tracing::warn!(pool = %pool, day_limit = ?limits.per_day, misses, "pacing miss: the provider refused the day before the pool's day limit; is rpd right?");
            return Ok(());
        }
        let lower = self.learning && stated.per_window.is_none();
        let misses = self
            .fleet
            .pace
            .missed(pool, limits, class.retry_hint_ms, lower)
            .await?;
        tracing::warn!(
            pool = %pool,
            configured = ?limits.per_window,
            stated = ?stated.per_window,
            window_ms = limits.window_ms,
            lowered = lower,
            misses,
            "pacing miss: the provider refused a call the limiter admitted"
        );
        Ok(())
    }

    /// Learn `stated` for `route`'s pool, unless learning is off or nothing was stated.
    async fn learn(&self, route: &Route, stated: &Stated) -> Result<(), EngineError> {
        let (Some(pool), Some(limits)) = (&route.pool, &route.pace) else {
            return Ok(());
        };
        if !self.learning || stated.is_empty() {
            return Ok(());
        }
        tracing::debug!(pool = %pool, ?stated, "learning what the provider stated");
        self.fleet
            .pace
            .learn(pool, limits, self.day_end(route), stated)
            .await?;
        Ok(())
    }

    /// When `route`'s pool day ends.
    pub(super) fn day_end(&self, route: &Route) -> u64 {
        route.day.day_end_ms(self.clock.now_ms())
    }
}

/// Close each open route of `routes` whose pool has no slot for a call of `tokens` now (until its
/// next slot), but `held`'s, whose slot the caller holds; asked for `who` (a run, whose turn a
/// pool's queue may hold), or for nobody. One question per pool, whatever the number of its
/// routes. The engine's pre-flight and an operator's "run now" see the same.
pub async fn close_full_pools(
    pace: &dyn Pacer,
    routes: &[Route],
    closures: &mut [Option<Closure>],
    tokens: u32,
    now_ms: u64,
    held: Option<&str>,
    who: Option<&Waiter<'_>>,
) -> Result<(), FleetError> {
    let mut asked: Vec<(&str, Option<Closure>)> = Vec::new();
    for (route, closure) in routes.iter().zip(closures.iter_mut()) {
        let (Some(pool), Some(limits), None) = (&route.pool, &route.pace, &closure) else {
            continue;
        };
        if held == Some(pool.as_str()) {
            continue;
        }
        let found = match asked.iter().find(|(p, _)| p == pool) {
            Some((_, found)) => found.clone(),
            None => {
                let day_end = route.day.day_end_ms(now_ms);
                let slot = pace.peek_as(pool, limits, day_end, tokens, who).await?;
                let found = full(pool, slot);
                asked.push((pool, found.clone()));
                found
            }
        };
        *closure = found;
    }
    Ok(())
}

/// Give back `held`, a slot of the pool of one of `routes` (or a place in its queue) that run
/// `run_id` will not use (for a call of `tokens`), at `now_ms`: its window and its day count it
/// no more, so it goes to another run instead of closing the pool a call early. The engine does
/// it when a run moves on; the queue when a waiting run is cancelled.
pub async fn give_back(
    pace: &dyn Pacer,
    routes: &[Route],
    held: &HeldSlot,
    run_id: &str,
    tokens: u32,
    now_ms: u64,
) -> Result<(), FleetError> {
    let Some((route, limits)) = routes.iter().find_map(|r| {
        let limits = r.pace.as_ref()?;
        (r.pool.as_deref() == Some(held.pool.as_str())).then_some((r, limits))
    }) else {
        return Ok(());
    };
    let day_end = route.day.day_end_ms(now_ms);
    if held.queued {
        pace.leave(&held.pool, limits, day_end, tokens, run_id)
            .await?;
        tracing::debug!(pool = %held.pool, "left the pool's queue");
        return Ok(());
    }
    let now = i64::try_from(now_ms).unwrap_or(i64::MAX);
    let at = i64::try_from(held.from_ms).unwrap_or(i64::MAX);
    pace.release(&held.pool, limits, day_end, tokens, at.saturating_sub(now))
        .await?;
    tracing::debug!(pool = %held.pool, "gave back a held slot its run will not use");
    Ok(())
}

/// The closure of a pool with no slot before `slot`'s end, if it has none now.
fn full(pool: &str, slot: Slot) -> Option<Closure> {
    match slot {
        Slot::Now => None,
        Slot::In(ms) => Some(Closure {
            kind: RestKind::Pace,
            remaining_ms: ms,
            reason: format!(
                "{pool} is full: its next slot is in {} s",
                ms.div_ceil(1000)
            ),
        }),
    }
}
