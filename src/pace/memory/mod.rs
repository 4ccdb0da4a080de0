//! The limiter in one process: [`MemoryPacer`], the rules of `pace.lua` on a [`Clock`]. A pool's
//! state and its window arithmetic are `state`'s; what one call may do with it is `view`'s; this
//! file holds the pools behind a lock and answers the [`Pacer`] trait.

mod state;
mod view;

use state::{State, span, window_of};
use view::View;

use super::{
    DaySync, Dispatched, Joined, Learned, LimitSource, Limits, Pacer, PoolSeen, PoolUse,
    Reservation, Seen, Share, Slot, Stated, WINDOW_GUARD_MS, Waiter,
};
use crate::clock::{Clock, SystemClock};
use crate::error::FleetError;
use async_trait::async_trait;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Limiters of pools in one process, timed by a [`Clock`].
pub struct MemoryPacer {
    clock: Arc<dyn Clock>,
    pools: Mutex<HashMap<String, State>>,
    seen: Mutex<HashMap<String, PoolSeen>>,
}

impl Default for MemoryPacer {
    fn default() -> Self {
        MemoryPacer::new(Arc::new(SystemClock))
    }
}

impl MemoryPacer {
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        MemoryPacer {
            clock,
            pools: Mutex::new(HashMap::new()),
            seen: Mutex::new(HashMap::new()),
        }
    }

    fn with<T>(
        &self,
        pool: &str,
        limits: &Limits,
        day_end_ms: u64,
        tokens: u32,
        f: impl FnOnce(&mut View<'_>) -> T,
    ) -> T {
        let now = self.clock.now_ms();
        let mut pools = self.pools.lock().unwrap_or_else(|e| e.into_inner());
        let st = pools.entry(pool.to_string()).or_default();
        if day_end_ms > 0 && st.day_end_ms != day_end_ms {
            st.day_end_ms = day_end_ms;
            st.day_used = 0;
            st.day_tokens = 0;
        }
        let limits = st.in_force(limits, now);
        let window = window_of(now, limits.window_ms.max(1), st.phase);
        let span = span(limits.window_ms.max(1));
        st.log.retain(|&m| m + span > now);
        // Windows before the current one are dropped; a pool that only counts keeps the one
        // before, whose end a provider's window may overlap.
        let windowed =
            !limits.rolling && (limits.per_window.is_some() || limits.tokens_per_window.is_some());
        let kept_from = match windowed {
            true => window,
            false => window.saturating_sub(1),
        };
        st.counts = st.counts.split_off(&kept_from);
        st.tails = st.tails.split_off(&window);
        let cost = if limits.counts_tokens() {
            u64::from(tokens)
        } else {
            0
        };
        f(&mut View {
            st,
            now,
            limits,
            cost,
        })
    }
}

#[async_trait]
impl Pacer for MemoryPacer {
    async fn peek_as(
        &self,
        pool: &str,
        limits: &Limits,
        day_end_ms: u64,
        tokens: u32,
        who: Option<&Waiter<'_>>,
    ) -> Result<Slot, FleetError> {
        Ok(self.with(pool, limits, day_end_ms, tokens, |v| {
            if v.granted(who, false).is_some() {
                return Slot::Now;
            }
            if v.day_full() {
                return v.slot(day_end_ms);
            }
            v.turn(who).unwrap_or_else(|| v.slot(day_end_ms))
        }))
    }

    async fn admit_as(
        &self,
        pool: &str,
        limits: &Limits,
        day_end_ms: u64,
        tokens: u32,
        who: Option<&Waiter<'_>>,
    ) -> Result<Slot, FleetError> {
        Ok(self.with(pool, limits, day_end_ms, tokens, |v| {
            if v.granted(who, true).is_some() {
                return Slot::Now;
            }
            if v.day_full() {
                return v.slot(day_end_ms);
            }
            if let Some(turn) = v.turn(who) {
                return turn;
            }
            let slot = v.slot(day_end_ms);
            if slot == Slot::Now {
                v.admit_now();
            }
            slot
        }))
    }

    async fn join(
        &self,
        pool: &str,
        limits: &Limits,
        day_end_ms: u64,
        tokens: u32,
        who: &Waiter<'_>,
    ) -> Result<Joined, FleetError> {
        Ok(self.with(pool, limits, day_end_ms, tokens, |v| {
            if let Some(valid_ms) = v.granted(Some(who), false) {
                return Joined::Granted { valid_ms };
            }
            if v.day_full() {
                return Joined::DaySpent {
                    wait_ms: day_end_ms.saturating_sub(v.now).max(1),
                };
            }
            let mine = v.cost;
            v.st.fair
                .enter(who, u32::try_from(mine).unwrap_or(u32::MAX));
            v.dispatch(64);
            v.cost = mine;
            if let Some(valid_ms) = v.granted(Some(who), false) {
                v.st.fair.untell(who.run_id);
                return Joined::Granted { valid_ms };
            }
            Joined::Queued {
                wait_ms: v.fair_wait(v.st.fair.ahead(who)).max(1),
            }
        }))
    }

    async fn dispatch(
        &self,
        pool: &str,
        limits: &Limits,
        day_end_ms: u64,
        max: u32,
    ) -> Result<Dispatched, FleetError> {
        Ok(self.with(pool, limits, day_end_ms, 0, |v| {
            if !v.day_full() {
                v.dispatch(max);
            }
            Dispatched {
                granted: v.st.fair.tell(),
                waiting: v.st.fair.waiting() as u64,
            }
        }))
    }

    async fn leave(
        &self,
        pool: &str,
        limits: &Limits,
        day_end_ms: u64,
        tokens: u32,
        run_id: &str,
    ) -> Result<(), FleetError> {
        let granted = self.with(pool, limits, day_end_ms, tokens, |v| {
            v.st.fair.remove(run_id);
            v.st.fair.forget(run_id, v.now)
        });
        if granted {
            self.release(pool, limits, day_end_ms, tokens, 0).await?;
        }
        Ok(())
    }

    async fn waiting_pools(&self) -> Result<Vec<String>, FleetError> {
        let pools = self.pools.lock().unwrap_or_else(|e| e.into_inner());
        let mut waiting: Vec<String> = pools
            .iter()
            .filter(|(_, st)| st.fair.waiting() > 0 || st.fair.has_untold())
            .map(|(pool, _)| pool.clone())
            .collect();
        waiting.sort();
        Ok(waiting)
    }

    async fn quiet(&self, _pool: &str, _quiet_ms: u64) -> Result<(), FleetError> {
        // Pools are listed by what they hold, not by a list to keep.
        Ok(())
    }

    async fn reserve(
        &self,
        pool: &str,
        limits: &Limits,
        day_end_ms: u64,
        tokens: u32,
    ) -> Result<Option<Reservation>, FleetError> {
        Ok(self.with(pool, limits, day_end_ms, tokens, |v| {
            // A reservation ahead of runs waiting their turn would pass them.
            if v.day_full() || v.st.fair.waiting() > 0 {
                return None;
            }
            let (win, w) = (v.win(), v.window());
            if v.limits.rolling || !v.windowed() {
                let wait_ms = if v.limits.rolling {
                    v.rolling_wait()
                } else {
                    0
                };
                v.count(w, wait_ms);
                return Some(Reservation {
                    wait_ms,
                    valid_ms: wait_ms + win,
                });
            }
            let mut x = v.free_from(w);
            if x == w && v.tail() {
                x = v.free_from(w + 1);
            }
            let wait_ms = if x > w {
                v.start(x) + WINDOW_GUARD_MS - v.now
            } else {
                0
            };
            v.count(x, wait_ms);
            Some(Reservation {
                wait_ms,
                valid_ms: v.start(x + 1) - v.now,
            })
        }))
    }

    async fn spent(
        &self,
        pool: &str,
        limits: &Limits,
        day_end_ms: u64,
        delta: i64,
    ) -> Result<(), FleetError> {
        if !limits.counts_tokens() || delta == 0 {
            return Ok(());
        }
        self.with(pool, limits, day_end_ms, 0, |v| {
            v.st.day_tokens = v.st.day_tokens.saturating_add_signed(delta);
            match v.limits.tokens_per_window {
                Some(limit) if v.limits.rolling => {
                    let moved = v.token_tat() + delta as f64 * v.emission(limit);
                    v.st.token_tat = moved.max(v.now as f64).ceil();
                }
                Some(_) if v.windowed() => {
                    let w = v.window();
                    let entry = v.st.counts.entry(w).or_default();
                    entry.1 = entry.1.saturating_add_signed(delta);
                }
                _ => {}
            }
        });
        Ok(())
    }

    async fn landed(
        &self,
        pool: &str,
        limits: &Limits,
        elapsed_ms: u64,
        tokens: u32,
    ) -> Result<bool, FleetError> {
        Ok(self.with(pool, limits, 0, tokens, |v| {
            let admitted = v.now.saturating_sub(elapsed_ms);
            let x = window_of(admitted, v.win(), v.st.phase) + 1;
            let tail = v.start(x) - admitted <= WINDOW_GUARD_MS;
            let doubled = v.st.tails.get(&x).copied().unwrap_or(0) > 0;
            if !(v.windowed() && tail && v.now < v.start(x) && doubled) {
                return false;
            }
            let tokens = if v.limits.tokens_per_window.is_some() {
                v.cost
            } else {
                0
            };
            *v.st.tails.entry(x).or_default() -= 1;
            let next = v.st.counts.entry(x).or_default();
            next.0 = next.0.saturating_sub(1);
            next.1 = next.1.saturating_sub(tokens);
            true
        }))
    }

    async fn missed(
        &self,
        pool: &str,
        limits: &Limits,
        hint_ms: Option<u64>,
        lower: bool,
    ) -> Result<u32, FleetError> {
        Ok(self.with(pool, limits, 0, 0, |v| {
            let w = v.window();
            if v.logs()
                && let Some(i) = v.st.log.iter().rposition(|&m| m <= v.now)
            {
                // A sliding window does not count the call it refused.
                v.st.log.remove(i);
            }
            match v.limits.per_window {
                Some(limit) if v.sliding() => {
                    // It is full until the hint.
                    let hint = hint_ms
                        .filter(|&ms| ms > 0)
                        .unwrap_or(v.win().div_ceil(u64::from(limit.max(1))));
                    v.slide_fill(v.now + hint, 0, limit);
                }
                Some(limit) if v.limits.rolling => v.refused_rolling(limit, hint_ms),
                Some(limit) if v.current(hint_ms.filter(|&ms| ms > 0)) => {
                    let count = v.st.counts.entry(w).or_default();
                    count.0 = count.0.max(limit);
                }
                Some(_) => {}
                None if lower && v.counting() => {
                    // Nobody states the limit: the calls counted in the provider's window the
                    // refusal closed (the one its hint ends; the window before ours in
                    // proportion to its overlap), but the refused one, are it (docs/design.md
                    // §4.4, limits nobody states), and that window is full as above; no miss
                    // lowers it further.
                    let hint = hint_ms.unwrap_or(0);
                    let theirs = (v.now + hint) as f64 - v.win() as f64;
                    let overlap = ((v.start(w) as f64 - theirs) / v.win() as f64).clamp(0.0, 1.0);
                    let before = w.checked_sub(1).map_or(0, |b| v.used_in(b).0);
                    let counted = v.used_in(w).0 + (f64::from(before) * overlap).floor() as u32;
                    let served = counted.saturating_sub(1);
                    if served >= 1 {
                        v.st.counted_window = Some(served);
                        if v.limits.rolling {
                            v.refused_rolling(served, hint_ms);
                        } else if v.current(hint_ms.filter(|&ms| ms > 0)) {
                            let count = v.st.counts.entry(w).or_default();
                            count.0 = count.0.max(served);
                        }
                    }
                }
                None => {}
            }
            if let (true, Some(limit)) = (lower, v.limits.per_window) {
                let lowered = (f64::from(limit) * 0.9).floor() as u32;
                v.st.working = Some((lowered.max(1), w + 1));
            }
            v.st.misses += 1;
            v.st.misses
        }))
    }

    async fn learn(
        &self,
        pool: &str,
        limits: &Limits,
        day_end_ms: u64,
        stated: &Stated,
    ) -> Result<(), FleetError> {
        let now = self.clock.now_ms();
        {
            let mut pools = self.pools.lock().unwrap_or_else(|e| e.into_inner());
            let st = pools.entry(pool.to_string()).or_default();
            let from = |in_body: bool| match in_body {
                true => Some(LimitSource::Refusal),
                false => Some(LimitSource::Headers),
            };
            if let Some(l) = stated.per_window {
                st.stated_window = Some(l);
                st.window_from = from(stated.in_body.per_window);
            }
            if let Some(l) = stated.tokens_per_window {
                st.stated_tokens = Some(l);
                st.tokens_from = from(stated.in_body.tokens_per_window);
            }
            if let Some(l) = stated.per_day {
                st.learned_day_limit = Some(l);
                st.day_from = from(stated.in_body.per_day);
            }
            if stated.ends_at_moment && !limits.pin {
                st.learn_kind(stated.window_ends_in_ms, limits, now);
            }
            st.learned_at = Some(now);
        }
        self.with(pool, limits, day_end_ms, 0, |v| v.take_in(stated));
        Ok(())
    }

    async fn release(
        &self,
        pool: &str,
        limits: &Limits,
        day_end_ms: u64,
        tokens: u32,
        slot_in_ms: i64,
    ) -> Result<(), FleetError> {
        self.with(pool, limits, day_end_ms, tokens, |v| {
            let at = v.now.saturating_add_signed(slot_in_ms);
            let near = |m: u64| m.abs_diff(at) <= WINDOW_GUARD_MS;
            if v.logs()
                && let Some(i) = v.st.log.iter().position(|&m| near(m))
            {
                v.st.log.remove(i);
            }
            if v.sliding() {
                // Only the log counts it.
            } else if v.limits.rolling {
                if let Some(limit) = v.limits.per_window
                    && v.st.tat > v.now as f64
                {
                    v.st.tat = (v.st.tat - v.call_emission(limit))
                        .floor()
                        .max(v.now as f64);
                }
                if let (Some(limit), true) = (v.limits.tokens_per_window, v.cost > 0)
                    && v.st.token_tat > v.now as f64
                {
                    let back = v.cost as f64 * v.emission(limit);
                    v.st.token_tat = (v.st.token_tat - back).floor().max(v.now as f64);
                }
            } else if v.windowed() {
                let x = window_of(at, v.win(), v.st.phase);
                let counted_tokens = if v.limits.tokens_per_window.is_some() {
                    v.cost
                } else {
                    0
                };
                if x >= v.window()
                    && let Some(entry) = v.st.counts.get_mut(&x)
                    && entry.0 > 0
                {
                    entry.0 -= 1;
                    entry.1 = entry.1.saturating_sub(counted_tokens);
                }
            }
            let end = v.st.day_end_ms;
            if v.st.day_used > 0 && (end == 0 || at < end) {
                v.st.day_used -= 1;
                v.st.day_tokens = v.st.day_tokens.saturating_sub(v.cost);
            }
        });
        Ok(())
    }

    async fn sync(
        &self,
        pool: &str,
        limits: &Limits,
        day_end_ms: u64,
        used: u64,
        limit: u64,
    ) -> Result<DaySync, FleetError> {
        Ok(self.with(pool, limits, day_end_ms, 0, |v| {
            let was = v.day_full();
            v.st.day_used = v.st.day_used.max(used.min(u64::from(u32::MAX)) as u32);
            if limit > 0 {
                let limit = limit.min(u64::from(u32::MAX)) as u32;
                v.st.learned_day_limit = Some(limit);
                v.st.day_from = Some(LimitSource::QuotaEndpoint);
                if !v.limits.pin || v.limits.per_day.is_none() {
                    v.limits.per_day = Some(limit);
                }
            }
            let full = v.day_full();
            DaySync {
                reopened: was && !full,
                full,
            }
        }))
    }

    async fn reopen_day(&self, pool: &str) -> Result<(), FleetError> {
        let mut pools = self.pools.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(st) = pools.get_mut(pool) {
            st.day_used = 0;
            st.day_tokens = 0;
        }
        Ok(())
    }

    async fn usage(
        &self,
        pool: &str,
        limits: &Limits,
        day_end_ms: u64,
    ) -> Result<PoolUse, FleetError> {
        Ok(self.with(pool, limits, day_end_ms, 0, |v| {
            let (w, now) = (v.window(), v.now as f64);
            let mut spent = PoolUse {
                day_used: v.st.day_used,
                day_tokens: v.st.day_tokens,
                misses: v.st.misses,
                learned: Learned {
                    per_window: v.st.stated_window,
                    per_day: v.st.learned_day_limit,
                    tokens_per_window: v.st.stated_tokens,
                    per_window_from: match v.st.counted_in_force {
                        true => Some(LimitSource::Counted),
                        false => v.st.window_from,
                    },
                    per_day_from: v.st.day_from,
                    tokens_per_window_from: v.st.tokens_from,
                    working_per_window: v.st.working.map(|(w, _)| w).or(v
                        .st
                        .counted_in_force
                        .then_some(v.limits.per_window)
                        .flatten()),
                    at_ms: v.st.learned_at,
                    phase_from_provider: v.st.phase > 0,
                    fixed_by_provider: v.st.learned_fixed,
                    sliding_by_provider: v.st.learned_sliding,
                },
                waiting: u32::try_from(v.st.fair.waiting()).unwrap_or(u32::MAX),
                tenants_waiting: u32::try_from(v.st.fair.tenants_waiting()).unwrap_or(u32::MAX),
                shares: v
                    .st
                    .fair
                    .shares(v.window())
                    .into_iter()
                    .map(|(tenant, slots)| Share { tenant, slots })
                    .collect(),
                ..PoolUse::default()
            };
            if v.limits.rolling {
                if v.sliding() {
                    let made = v.st.log.iter().filter(|&&m| m <= v.now).count();
                    spent.window_used = u32::try_from(made).unwrap_or(u32::MAX);
                    let ahead = v.st.log.len() - made;
                    spent.reserved = u32::try_from(ahead).unwrap_or(u32::MAX);
                } else if let Some(limit) = v.limits.per_window {
                    let used = ((v.tat() - now) / v.call_emission(limit)).ceil() as u32;
                    spent.window_used = used.min(limit);
                }
                if let Some(limit) = v.limits.tokens_per_window {
                    let used = ((v.token_tat() - now) / v.emission(limit)).ceil() as u32;
                    spent.window_tokens = used.min(limit);
                }
                spent.window_resets_in_ms = v.rolling_wait();
            } else if v.windowed() {
                let (calls, tokens) = v.used_in(w);
                spent.window_used = calls;
                spent.window_tokens = u32::try_from(tokens).unwrap_or(u32::MAX);
                spent.window_resets_in_ms = v.start(w + 1) - v.now;
                spent.reserved = v.st.counts.range(w + 1..).map(|(_, (n, _))| n).sum();
            }
            spent
        }))
    }

    async fn saw(&self, pool: &str, seen: Seen) -> Result<(), FleetError> {
        let mut all = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        let kept = all.entry(pool.to_string()).or_default();
        match seen {
            Seen::Headroom(h) => kept.headroom = Some(h),
            Seen::Refusal(r) => kept.last_429 = Some(r),
        }
        Ok(())
    }

    async fn seen(&self, pool: &str) -> Result<PoolSeen, FleetError> {
        let all = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        Ok(all.get(pool).cloned().unwrap_or_default())
    }
}
