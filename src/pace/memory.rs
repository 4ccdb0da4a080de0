//! The limiter in one process: [`MemoryPacer`], the rules of `pace.lua` on a [`Clock`].

use super::{DaySync, Limits, Pacer, PoolSeen, PoolUse, Reservation, Seen, Slot, WINDOW_GUARD_MS};
use crate::clock::{Clock, SystemClock};
use crate::fleet::FleetError;
use async_trait::async_trait;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

/// One pool's limiter state.
#[derive(Debug, Default)]
struct State {
    /// Fixed windows: calls counted per window index.
    counts: BTreeMap<u64, u32>,
    /// Rolling windows: the theoretical arrival time, ms.
    tat: u64,
    day_end_ms: u64,
    day_used: u32,
    /// A day limit learned from the quota endpoint, used when none is declared.
    learned_day_limit: Option<u32>,
    misses: u32,
}

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

/// One call's view of a pool: its state, the time, and the limits it is asked with.
struct View<'a> {
    st: &'a mut State,
    now: u64,
    limits: &'a Limits,
}

impl View<'_> {
    fn window(&self) -> u64 {
        self.now / self.limits.window_ms.max(1)
    }

    fn emission(&self, limit: u32) -> f64 {
        self.limits.window_ms as f64 / f64::from(limit)
    }

    fn used_in(&self, w: u64) -> u32 {
        self.st.counts.get(&w).copied().unwrap_or(0)
    }

    fn free_from(&self, mut w: u64, limit: u32) -> u64 {
        while self.used_in(w) >= limit {
            w += 1;
        }
        w
    }

    /// Whether a call now may reach the provider in the next fixed window (see
    /// [`WINDOW_GUARD_MS`]).
    fn tail(&self) -> bool {
        let win = self.limits.window_ms.max(1);
        !self.limits.rolling
            && self.limits.per_window.is_some()
            && (self.window() + 1) * win - self.now <= WINDOW_GUARD_MS
    }

    fn day_limit(&self) -> Option<u32> {
        self.limits.per_day.or(self.st.learned_day_limit)
    }

    fn day_full(&self) -> bool {
        self.day_limit()
            .is_some_and(|limit| self.st.day_used >= limit)
    }

    fn tat(&self) -> u64 {
        self.st.tat.max(self.now)
    }

    /// Ms until the pool has room (0: now).
    fn wait(&self) -> u64 {
        let win = self.limits.window_ms.max(1);
        match self.limits.per_window {
            None => 0,
            Some(limit) if self.limits.rolling => {
                let allow_at = self.tat() as f64 - f64::from(limit - 1) * self.emission(limit);
                (allow_at - self.now as f64).max(0.0).ceil() as u64
            }
            Some(limit)
                if self.used_in(self.window()) >= limit
                    || (self.tail() && self.used_in(self.window() + 1) >= limit) =>
            {
                self.free_from(self.window() + 1, limit) * win + WINDOW_GUARD_MS - self.now
            }
            Some(_) => 0,
        }
    }

    fn count(&mut self, window: u64) {
        self.st.day_used += 1;
        match self.limits.per_window {
            Some(limit) if self.limits.rolling => {
                self.st.tat = (self.tat() as f64 + self.emission(limit)).ceil() as u64;
            }
            Some(_) => {
                if window == self.window() && self.tail() {
                    *self.st.counts.entry(window + 1).or_default() += 1;
                }
                *self.st.counts.entry(window).or_default() += 1;
            }
            None => {}
        }
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
        f: impl FnOnce(&mut View<'_>) -> T,
    ) -> T {
        let now = self.clock.now_ms();
        let mut pools = self.pools.lock().unwrap_or_else(|e| e.into_inner());
        let st = pools.entry(pool.to_string()).or_default();
        if day_end_ms > 0 && st.day_end_ms != day_end_ms {
            st.day_end_ms = day_end_ms;
            st.day_used = 0;
        }
        let window = now / limits.window_ms.max(1);
        st.counts = st.counts.split_off(&window);
        f(&mut View { st, now, limits })
    }
}

#[async_trait]
impl Pacer for MemoryPacer {
    async fn peek(&self, pool: &str, limits: &Limits, day_end_ms: u64) -> Result<Slot, FleetError> {
        Ok(self.with(pool, limits, day_end_ms, |v| {
            if v.day_full() {
                return Slot::In(day_end_ms.saturating_sub(v.now).max(1));
            }
            match v.wait() {
                0 => Slot::Now,
                ms => Slot::In(ms),
            }
        }))
    }

    async fn admit(
        &self,
        pool: &str,
        limits: &Limits,
        day_end_ms: u64,
    ) -> Result<Slot, FleetError> {
        Ok(self.with(pool, limits, day_end_ms, |v| {
            if v.day_full() {
                return Slot::In(day_end_ms.saturating_sub(v.now).max(1));
            }
            match v.wait() {
                0 => {
                    let w = v.window();
                    v.count(w);
                    Slot::Now
                }
                ms => Slot::In(ms),
            }
        }))
    }

    async fn reserve(
        &self,
        pool: &str,
        limits: &Limits,
        day_end_ms: u64,
    ) -> Result<Option<Reservation>, FleetError> {
        Ok(self.with(pool, limits, day_end_ms, |v| {
            if v.day_full() {
                return None;
            }
            let win = v.limits.window_ms.max(1);
            let w = v.window();
            let reservation = match v.limits.per_window {
                None => {
                    v.count(w);
                    Reservation {
                        wait_ms: 0,
                        valid_ms: win,
                    }
                }
                Some(limit) if v.limits.rolling => {
                    let slot = (v.tat() as f64 - f64::from(limit - 1) * v.emission(limit))
                        .max(v.now as f64);
                    let wait_ms = (slot - v.now as f64).ceil() as u64;
                    v.count(w);
                    Reservation {
                        wait_ms,
                        valid_ms: wait_ms + win,
                    }
                }
                Some(limit) => {
                    let mut x = v.free_from(w, limit);
                    if x == w && v.tail() {
                        x = v.free_from(w + 1, limit);
                    }
                    v.count(x);
                    Reservation {
                        wait_ms: if x > w {
                            x * win + WINDOW_GUARD_MS - v.now
                        } else {
                            0
                        },
                        valid_ms: (x + 1) * win - v.now,
                    }
                }
            };
            Some(reservation)
        }))
    }

    async fn missed(&self, pool: &str, limits: &Limits) -> Result<u32, FleetError> {
        Ok(self.with(pool, limits, 0, |v| {
            let w = v.window();
            match v.limits.per_window {
                Some(_) if v.limits.rolling => v.st.tat = v.now + v.limits.window_ms,
                Some(limit) => {
                    let count = v.st.counts.entry(w).or_default();
                    *count = (*count).max(limit);
                }
                None => {}
            }
            v.st.misses += 1;
            v.st.misses
        }))
    }

    async fn sync(
        &self,
        pool: &str,
        limits: &Limits,
        day_end_ms: u64,
        used: u64,
        limit: u64,
    ) -> Result<DaySync, FleetError> {
        Ok(self.with(pool, limits, day_end_ms, |v| {
            let was = v.day_full();
            v.st.day_used = v.st.day_used.max(used.min(u64::from(u32::MAX)) as u32);
            if limit > 0 {
                v.st.learned_day_limit = Some(limit.min(u64::from(u32::MAX)) as u32);
            }
            let full = v.day_full();
            DaySync {
                reopened: was && !full,
                full,
            }
        }))
    }

    async fn reopen(&self, pool: &str) -> Result<(), FleetError> {
        let mut pools = self.pools.lock().unwrap_or_else(|e| e.into_inner());
        pools.remove(pool);
        Ok(())
    }

    async fn usage(
        &self,
        pool: &str,
        limits: &Limits,
        day_end_ms: u64,
    ) -> Result<PoolUse, FleetError> {
        Ok(self.with(pool, limits, day_end_ms, |v| {
            let w = v.window();
            let (window_used, window_resets_in_ms, reserved) = match v.limits.per_window {
                None => (0, 0, 0),
                Some(limit) if v.limits.rolling => {
                    let used = ((v.tat() - v.now) as f64 / v.emission(limit)).ceil() as u32;
                    (used.min(limit), v.wait(), 0)
                }
                Some(_) => (
                    v.used_in(w),
                    (w + 1) * v.limits.window_ms.max(1) - v.now,
                    v.st.counts.range(w + 1..).map(|(_, n)| n).sum(),
                ),
            };
            PoolUse {
                window_used,
                window_resets_in_ms,
                day_used: v.st.day_used,
                reserved,
                misses: v.st.misses,
            }
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
