//! The engine's side of pacing (docs/design.md §4.2, §4.4): a pool with no slot closes its
//! routes without a call, a call on a paced route takes a slot first, a run that must wait for
//! a slot holds one of a later window and wakes at it, and a refusal despite the slot is a
//! pacing miss.

use super::{Engine, EngineError, Run};
use crate::events::Event;
use crate::job::HeldSlot;
use crate::pace::{Slot, WINDOW_GUARD_MS};
use crate::preflight::Preflight;
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

/// How far this process's clock may be from the limiter's when it guesses that a slot was
/// taken near a window's end.
const LIMITER_SKEW_MS: u64 = 1_000;

/// A held slot's wake-up is spread over this much after the slot's moment, so that a window's
/// worth of waiting runs does not land in one instant.
const SLOT_JITTER_MS: (u64, u64) = (0, 250);

impl Engine {
    /// Close each open route of `routes` whose pool has no slot now; a slot this run holds
    /// keeps its pool open. One question per pool, whatever the number of its routes.
    pub(crate) async fn pace_closures(
        &self,
        run: &Run<'_>,
        routes: &[Route],
        closures: &mut [Option<Closure>],
    ) -> Result<(), EngineError> {
        let now = self.clock.now_ms();
        let mut asked: Vec<(&str, Option<Closure>)> = Vec::new();
        for (route, closure) in routes.iter().zip(closures.iter_mut()) {
            let (Some(pool), Some(limits), None) = (&route.pool, &route.pace, &closure) else {
                continue;
            };
            if run.slot.as_ref().is_some_and(|s| s.usable(pool, now)) {
                continue;
            }
            let found = match asked.iter().find(|(p, _)| p == pool) {
                Some((_, found)) => found.clone(),
                None => {
                    let slot = self
                        .fleet
                        .pace
                        .peek(pool, limits, self.day_end(route), run.tokens)
                        .await?;
                    let found = full(pool, slot);
                    asked.push((pool, found.clone()));
                    found
                }
            };
            *closure = found;
        }
        Ok(())
    }

    /// Before a call on `route`: take a slot of its pool. A continuation tries once and is
    /// never paced out: it is counted when there is room.
    pub(crate) async fn take_slot(
        &self,
        run: &mut Run<'_>,
        route: &Route,
    ) -> Result<Taken, EngineError> {
        let (Some(pool), Some(limits)) = (&route.pool, &route.pace) else {
            return Ok(Taken::Unpaced);
        };
        let now = self.clock.now_ms();
        if run.slot.as_ref().is_some_and(|s| s.usable(pool, now)) {
            run.slot = None;
            return Ok(Taken::Held);
        }
        let slot = self
            .fleet
            .pace
            .admit(pool, limits, self.day_end(route), run.tokens)
            .await?;
        match full(pool, slot) {
            Some(closure) if !run.job.is_continuation() => Ok(Taken::Full(closure)),
            _ => Ok(Taken::Admitted { at_ms: now }),
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

    /// A wait for a pool's next slot holds one: the run reserves the first slot with room and
    /// wakes at it, instead of waking with every other waiting run at the window's start. Any
    /// other decision is returned as it is.
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
        let paced = earliest
            .filter(|(_, c)| c.kind == RestKind::Pace)
            .map(|(i, _)| &routes[i]);
        let Some(held) = paced.map(|r| self.reserve_slot(r, run.tokens)) else {
            return Ok(Preflight::Wait { until_ms, reason });
        };
        let Some(held) = held.await? else {
            return Ok(Preflight::Wait { until_ms, reason });
        };
        if held.from_ms >= run.job.deadline_ms {
            // The slot is counted but the run cannot wait for it: the decision stands.
            return Ok(Preflight::Wait { until_ms, reason });
        }
        let (from_ms, wait_ms) = (
            held.from_ms,
            held.from_ms.saturating_sub(self.clock.now_ms()),
        );
        let pool = held.pool.clone();
        run.slot = Some(held);
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
        run.slot = Some(held);
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

    /// A refusal for the pool's quota of a call the limiter let through: the configured limit
    /// is probably wrong. The window is marked full so no replica calls into it again.
    pub(crate) async fn pacing_miss(&self, route: &Route) -> Result<(), EngineError> {
        let (Some(pool), Some(limits)) = (&route.pool, &route.pace) else {
            return Ok(());
        };
        let misses = self.fleet.pace.missed(pool, limits).await?;
        tracing::warn!(
            pool = %pool,
            limit = ?limits.per_window,
            window_ms = limits.window_ms,
            misses,
            "pacing miss: the provider refused a call the limiter admitted; is the pool's limit right?"
        );
        Ok(())
    }

    /// When `route`'s pool day ends.
    pub(super) fn day_end(&self, route: &Route) -> u64 {
        route.day.day_end_ms(self.clock.now_ms())
    }
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
