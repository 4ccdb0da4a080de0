//! The limiter in one process: [`MemoryPacer`], the rules of `pace.lua` on a [`Clock`].

use super::fair::FairQueue;
use super::{
    DaySync, Dispatched, Joined, Learned, Limits, Pacer, PoolSeen, PoolUse, Reservation, Seen,
    Share, Slot, Stated, WINDOW_GUARD_MS, Waiter, rolling_emission_ms,
};
use crate::clock::{Clock, SystemClock};
use crate::error::FleetError;
use async_trait::async_trait;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

/// One pool's limiter state.
#[derive(Debug, Default)]
struct State {
    /// Fixed windows: (calls, tokens) counted per window index.
    counts: BTreeMap<u64, (u32, u64)>,
    /// Fixed windows: calls counted in a window only because they were admitted at the end of
    /// the one before.
    tails: BTreeMap<u64, u32>,
    /// Rolling windows: the theoretical arrival time of calls and of tokens, ms.
    tat: f64,
    token_tat: f64,
    day_end_ms: u64,
    day_used: u32,
    day_tokens: u64,
    /// What the provider stated: requests and tokens per window, requests per day (or the
    /// quota endpoint's, or what a day refusal showed).
    stated_window: Option<u32>,
    stated_tokens: Option<u32>,
    learned_day_limit: Option<u32>,
    /// Where fixed windows start, ms past the epoch's.
    phase: u64,
    /// The working per-window limit a miss lowered, and the window from which it holds.
    working: Option<(u32, u64)>,
    learned_at: Option<u64>,
    /// A pool declared rolling whose provider said where its window ends.
    learned_fixed: bool,
    /// The provider's window slides: a reset it stated moved on by less than a window.
    learned_sliding: bool,
    /// The latest reset the provider stated as a moment (epoch ms).
    last_reset_ms: u64,
    /// A sliding window's log: the moments its calls are made (reserved ones included), sorted.
    log: Vec<u64>,
    misses: u32,
    /// The runs waiting their turn, and the slots granted to some of them.
    fair: FairQueue,
}

impl State {
    /// The limits in force (as `pace.lua`'s `settle`): stated ones replace configured ones
    /// unless pinned, and a working limit caps the window's, recovering by one a window.
    fn in_force(&mut self, configured: &Limits, now: u64) -> Limits {
        let stated = |s: Option<u32>, declared: Option<u32>| match s {
            Some(s) if !configured.pin || declared.is_none() => Some(s),
            _ => declared,
        };
        let mut limits = Limits {
            per_window: stated(self.stated_window, configured.per_window),
            tokens_per_window: stated(self.stated_tokens, configured.tokens_per_window),
            per_day: stated(self.learned_day_limit, configured.per_day),
            ..*configured
        };
        if !configured.pin {
            if self.learned_sliding {
                limits.rolling = true;
            } else if self.learned_fixed {
                limits.rolling = false;
            }
        }
        let win = limits.window_ms.max(1);
        if limits.rolling {
            self.phase = 0;
        }
        let w = window_of(now, win, self.phase);
        if let Some((working, moved)) = self.working {
            let raised =
                working.saturating_add(u32::try_from(w.saturating_sub(moved)).unwrap_or(u32::MAX));
            match limits.per_window {
                Some(limit) if raised < limit => {
                    self.working = Some((raised, w.max(moved)));
                    limits.per_window = Some(raised);
                }
                _ => self.working = None,
            }
        }
        limits
    }
}

impl State {
    /// What a reset stated as a moment, `ends_in_ms` from `now`, says of the provider's kind of
    /// window (as `pace.lua`'s `learn`): a moment is a window's (a bucket states none), and a
    /// sliding window's end steps by the gap between its oldest calls as each ages out, by
    /// less than a window. Steps within the guard are the same moment; they add up until one
    /// is not.
    fn learn_kind(&mut self, ends_in_ms: Option<u64>, declared: &Limits, now: u64) {
        if let Some(ends) = ends_in_ms.filter(|&e| e > 0) {
            let reset = now + ends;
            let last = self.last_reset_ms;
            let step = reset.saturating_sub(last);
            if last == 0 || step > WINDOW_GUARD_MS {
                // (Only a declared window's length is known well enough to tell a step short.)
                let short = step < declared.window_ms.saturating_sub(WINDOW_GUARD_MS);
                if last > 0 && short && declared.per_window.is_some() {
                    self.learned_sliding = true;
                    self.learned_fixed = false;
                }
                self.last_reset_ms = reset;
            }
        }
        // A bucket states no moment: a pool declared rolling is paced by windows until they
        // slide.
        if declared.rolling && !self.learned_sliding {
            self.learned_fixed = true;
        }
    }
}

/// How long after its moment a sliding window's call leaves it: the window and the guard (the
/// provider's clock starts when the call arrives).
fn span(win: u64) -> u64 {
    win + WINDOW_GUARD_MS
}

/// The fixed window of `win` ms starting `phase` ms past the epoch's that `t` falls in.
fn window_of(t: u64, win: u64, phase: u64) -> u64 {
    (t + win - phase % win) / win - 1
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

/// One call's view of a pool: its state, the time, the limits it is asked with and the call's
/// tokens (0 when the pool does not count them).
struct View<'a> {
    st: &'a mut State,
    now: u64,
    /// The limits in force: the configured ones with what was learned.
    limits: Limits,
    cost: u64,
}

impl View<'_> {
    fn win(&self) -> u64 {
        self.limits.window_ms.max(1)
    }

    fn window(&self) -> u64 {
        window_of(self.now, self.win(), self.st.phase)
    }

    /// Where fixed window `x` starts.
    fn start(&self, x: u64) -> u64 {
        x * self.win() + self.st.phase
    }

    /// Whether windows are fixed and limit something.
    fn windowed(&self) -> bool {
        !self.limits.rolling
            && (self.limits.per_window.is_some() || self.limits.tokens_per_window.is_some())
    }

    fn used_in(&self, w: u64) -> (u32, u64) {
        self.st.counts.get(&w).copied().unwrap_or((0, 0))
    }

    /// Whether a window of the provider's that ends `ends_ms` from now (`None`: not said) is
    /// the current one (as `pace.lua`'s `current`): one that ends by the guard after the
    /// current window began is the one before, though the phases agree within the guard.
    fn current(&self, ends_ms: Option<u64>) -> bool {
        ends_ms.is_none_or(|ends| self.now + ends > self.start(self.window()) + WINDOW_GUARD_MS)
    }

    /// Whether fixed window `w` has room for this call and its tokens.
    fn room(&self, w: u64) -> bool {
        let (calls, tokens) = self.used_in(w);
        let calls_ok = self.limits.per_window.is_none_or(|limit| calls < limit);
        let tokens_ok = match self.limits.tokens_per_window {
            Some(limit) if self.cost > 0 => tokens == 0 || tokens + self.cost <= u64::from(limit),
            _ => true,
        };
        calls_ok && tokens_ok
    }

    fn free_from(&self, mut w: u64) -> u64 {
        while !self.room(w) {
            w += 1;
        }
        w
    }

    /// Whether a call now may reach the provider in the next fixed window (see
    /// [`WINDOW_GUARD_MS`]).
    fn tail(&self) -> bool {
        self.windowed() && self.start(self.window() + 1) - self.now <= WINDOW_GUARD_MS
    }

    fn day_full(&self) -> bool {
        let calls = self
            .limits
            .per_day
            .is_some_and(|limit| self.st.day_used >= limit);
        let tokens = self.limits.tokens_per_day.is_some_and(|limit| {
            self.cost > 0
                && self.st.day_tokens > 0
                && self.st.day_tokens + self.cost > u64::from(limit)
        });
        calls || tokens
    }

    fn emission(&self, limit: u32) -> f64 {
        self.win() as f64 / f64::from(limit)
    }

    /// The spacing of a rolling window's calls (see [`rolling_emission_ms`]).
    fn call_emission(&self, limit: u32) -> f64 {
        rolling_emission_ms(self.win(), limit)
    }

    fn tat(&self) -> f64 {
        self.st.tat.max(self.now as f64)
    }

    /// Whether the pool is paced by a sliding window's log.
    fn sliding(&self) -> bool {
        self.st.learned_sliding && !self.limits.pin
    }

    /// Whether calls' moments are logged: the provider states moments, or its window slides.
    fn logs(&self) -> bool {
        self.limits.per_window.is_some() && (self.sliding() || self.st.last_reset_ms > 0)
    }

    /// Ms until a sliding window has a slot (as `pace.lua`'s `slide_wait`).
    fn slide_wait(&self, limit: u32) -> u64 {
        let limit = limit as usize;
        match self.st.log.len().checked_sub(limit) {
            Some(i) => (self.st.log[i] + span(self.win())).saturating_sub(self.now),
            None => 0,
        }
    }

    fn log_at(&mut self, at: u64) {
        let i = self.st.log.partition_point(|&m| m <= at);
        self.st.log.insert(i, at);
    }

    /// The provider counts `limit - left` calls in its sliding window and frees its next slot
    /// at `at` (as `pace.lua`'s `slide_fill`).
    fn slide_fill(&mut self, at: u64, left: u32, limit: u32) {
        let (now, span) = (self.now, span(self.win()));
        let past = self.st.log.iter().filter(|&&m| m <= now).count() as u64;
        let early = |m: u64| left == 0 && m <= now && m + span < at;
        let early_n = self.st.log.iter().filter(|&&m| early(m)).count() as u64;
        let k = u64::from(limit.saturating_sub(left)).saturating_sub(past) + early_n;
        if k == 0 {
            return;
        }
        self.st.log.retain(|&m| !early(m));
        let last = at.max(now + span);
        for i in 0..k {
            let leaves = if k > 1 {
                at + i * (last - at) / (k - 1)
            } else {
                at
            };
            self.log_at(leaves.saturating_sub(span));
        }
    }

    fn token_tat(&self) -> f64 {
        self.st.token_tat.max(self.now as f64)
    }

    /// Ms until a rolling window admits this call and its tokens (0: now).
    fn rolling_wait(&self) -> u64 {
        let now = self.now as f64;
        let mut wait: f64 = 0.0;
        match self.limits.per_window {
            Some(limit) if self.sliding() => wait = self.slide_wait(limit) as f64,
            Some(limit) => {
                wait = self.tat() - f64::from(limit - 1) * self.call_emission(limit) - now;
            }
            None => {}
        }
        if let (Some(limit), true) = (self.limits.tokens_per_window, self.cost > 0) {
            let need = self.cost.min(u64::from(limit)) as f64;
            wait =
                wait.max(self.token_tat() + need * self.emission(limit) - self.win() as f64 - now);
        }
        wait.max(0.0).ceil() as u64
    }

    /// When this call has room: the day's end when the day is full, else the window's wait.
    fn slot(&self, day_end_ms: u64) -> Slot {
        if self.day_full() {
            return Slot::In(day_end_ms.saturating_sub(self.now).max(1));
        }
        match self.wait() {
            0 => Slot::Now,
            ms => Slot::In(ms),
        }
    }

    /// Ms until the pool has room (0: now).
    fn wait(&self) -> u64 {
        let w = self.window();
        if self.limits.rolling {
            self.rolling_wait()
        } else if self.windowed() && (!self.room(w) || (self.tail() && !self.room(w + 1))) {
            self.start(self.free_from(w + 1)) + WINDOW_GUARD_MS - self.now
        } else {
            0
        }
    }

    /// Count a call now, that [`View::wait`] has room for (a call at a fixed window's very
    /// end is counted in the next window too; the day counts it once).
    fn admit_now(&mut self) {
        let w = self.window();
        let tail = self.tail();
        self.count(w, 0);
        if tail {
            let tokens = if self.limits.tokens_per_window.is_some() {
                self.cost
            } else {
                0
            };
            let next = self.st.counts.entry(w + 1).or_default();
            next.0 += 1;
            next.1 += tokens;
            *self.st.tails.entry(w + 1).or_default() += 1;
        }
    }

    /// Until when (epoch ms) a slot counted now may be used.
    fn valid_until(&self) -> u64 {
        if self.windowed() {
            self.start(self.window() + 1)
        } else {
            self.now + self.win()
        }
    }

    /// Grant the room there is now to the runs next in line, at most `max` (as `pace.lua`'s
    /// `dispatch`).
    fn dispatch(&mut self, max: u32) {
        self.st.fair.expire(self.now);
        let mut n = 0;
        while n < max && self.st.fair.waiting() > 0 && !(self.windowed() && self.tail()) {
            let Some((run, tokens)) = self.st.fair.head(self.now) else {
                break;
            };
            self.cost = u64::from(tokens);
            if self.day_full() || self.wait() > 0 {
                break;
            }
            let tenant = self.st.fair.tenant_of(&run).unwrap_or_default().to_string();
            self.st.fair.pop(&run);
            self.admit_now();
            let (until, w) = (self.valid_until(), self.window());
            self.st.fair.grant(run, &tenant, until, w);
            n += 1;
        }
    }

    /// Ms a waiter with `ahead` runs before it may expect to wait for its slot.
    fn fair_wait(&self, ahead: u64) -> u64 {
        let per = u64::from(self.limits.per_window.unwrap_or(0).max(1));
        let win = self.win();
        if self.limits.rolling {
            return self.wait().max(1) + (ahead * win).div_ceil(per);
        }
        let w = self.window();
        let left = per.saturating_sub(u64::from(self.used_in(w).0));
        if ahead < left && !self.tail() {
            return 250;
        }
        self.start(w + 1) + WINDOW_GUARD_MS - self.now + (ahead.saturating_sub(left) / per) * win
    }

    /// `who`'s granted slot, as (valid ms from now): taken when `take`.
    fn granted(&mut self, who: Option<&Waiter<'_>>, take: bool) -> Option<u64> {
        let who = who?;
        // (A grant past its slot is no grant; dispatch sweeps them.)
        let until = self
            .st
            .fair
            .grant_until(who.run_id)
            .filter(|&until| until > self.now)?;
        if take {
            self.st.fair.take_grant(who.run_id);
        }
        Some(until - self.now)
    }

    /// While others wait their turn, `who` waits too: about this long.
    fn turn(&self, who: Option<&Waiter<'_>>) -> Option<Slot> {
        let who = who?;
        if self.st.fair.waiting() == 0 {
            return None;
        }
        Some(Slot::In(self.fair_wait(self.st.fair.ahead(who)).max(1)))
    }

    /// What the provider stated, as `pace.lua`'s `learn` takes it in (the limits themselves
    /// are already in force).
    fn take_in(&mut self, stated: &Stated) {
        let win = self.win();
        if let Some(ends) = stated.window_ends_in_ms
            && self.windowed()
            && ends > 0
            && ends <= win + WINDOW_GUARD_MS
        {
            let phase = (self.now + ends) % win;
            let d = phase.abs_diff(self.st.phase);
            if d.min(win - d) > WINDOW_GUARD_MS {
                self.realign(phase);
            }
        }
        let w = self.window();
        if let (Some(left), Some(limit)) = (stated.window_remaining, self.limits.per_window) {
            let used = limit.saturating_sub(left);
            let ends = stated.window_ends_in_ms.filter(|&e| e > 0);
            if self.sliding() {
                self.slide_fill(self.now + ends.unwrap_or(0), left, limit);
            } else if let (true, 0, Some(ends), true) =
                (self.limits.rolling, left, ends, stated.ends_at_moment)
            {
                // A full window with a stated end (of a kind not learned yet) has its next slot
                // there, sooner or later than a bucket's: a call in flight now is refused or
                // counted after it.
                let emission = self.call_emission(limit);
                let at = (self.now + ends) as f64 + f64::from(limit.saturating_sub(1)) * emission;
                self.st.tat = at.ceil();
            } else if self.limits.rolling {
                let at = self.now as f64 + f64::from(used) * self.call_emission(limit);
                self.st.tat = self.tat().max(at.ceil());
            } else if self.windowed() && self.current(ends) {
                let entry = self.st.counts.entry(w).or_default();
                entry.0 = entry.0.max(used);
            }
        }
        if let (Some(left), Some(limit)) = (stated.tokens_remaining, self.limits.tokens_per_window)
        {
            let used = limit.saturating_sub(left);
            if self.limits.rolling {
                let at = self.now as f64 + f64::from(used) * self.emission(limit);
                self.st.token_tat = self.token_tat().max(at.ceil());
            } else if self.windowed() && self.current(stated.window_ends_in_ms.filter(|&e| e > 0)) {
                let entry = self.st.counts.entry(w).or_default();
                entry.1 = entry.1.max(u64::from(used));
            }
        }
        if let (Some(left), Some(limit)) = (stated.day_remaining, self.limits.per_day) {
            self.st.day_used = self.st.day_used.max(limit.saturating_sub(left));
        }
        if stated.day_spent {
            let limit = match self.limits.per_day {
                Some(limit) => limit,
                None => {
                    let learned = self.st.day_used.max(1);
                    self.st.learned_day_limit = Some(learned);
                    learned
                }
            };
            self.st.day_used = self.st.day_used.max(limit);
        }
    }

    /// Realign fixed windows to start `phase` ms past the epoch's: each count moves to the
    /// window where its calls are made (the current one's stays current, a held slot's goes to
    /// the window its holder wakes in); tails count in full.
    fn realign(&mut self, phase: u64) {
        let (win, w) = (self.win(), self.window());
        let nw = window_of(self.now, win, phase);
        let mut moved: BTreeMap<u64, (u32, u64)> = BTreeMap::new();
        for (x, (calls, tokens)) in std::mem::take(&mut self.st.counts) {
            let to = if x > w {
                window_of(self.start(x) + WINDOW_GUARD_MS, win, phase).max(nw)
            } else {
                nw
            };
            let entry = moved.entry(to).or_default();
            entry.0 += calls;
            entry.1 += tokens;
        }
        self.st.counts = moved;
        self.st.tails.clear();
        self.st.phase = phase;
    }

    /// Count the call (and its tokens) in the day, in the log at the moment the call is made
    /// (`wait` ms from now), and in fixed window `w` or the rolling windows.
    fn count(&mut self, w: u64, wait: u64) {
        self.st.day_used += 1;
        self.st.day_tokens += self.cost;
        if self.logs() {
            self.log_at(self.now + wait);
        }
        if self.limits.rolling {
            if let (Some(limit), false) = (self.limits.per_window, self.sliding()) {
                self.st.tat = (self.tat() + self.call_emission(limit)).ceil();
            }
            if let (Some(limit), true) = (self.limits.tokens_per_window, self.cost > 0) {
                self.st.token_tat =
                    (self.token_tat() + self.cost as f64 * self.emission(limit)).ceil();
            }
        } else if self.windowed() {
            let counted_tokens = if self.limits.tokens_per_window.is_some() {
                self.cost
            } else {
                0
            };
            let entry = self.st.counts.entry(w).or_default();
            entry.0 += 1;
            entry.1 += counted_tokens;
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
        st.counts = st.counts.split_off(&window);
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
                Some(limit) if v.limits.rolling => {
                    let emission = v.call_emission(limit);
                    let next_at = match hint_ms.filter(|&ms| ms > 0) {
                        Some(ms) => (v.now + ms) as f64,
                        None => v.now as f64 + emission,
                    };
                    let tat = (next_at + f64::from(limit - 1) * emission).ceil();
                    v.st.tat = v.tat().max(tat);
                }
                Some(limit) if v.current(hint_ms.filter(|&ms| ms > 0)) => {
                    let count = v.st.counts.entry(w).or_default();
                    count.0 = count.0.max(limit);
                }
                _ => {}
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
            if let Some(l) = stated.per_window {
                st.stated_window = Some(l);
            }
            if let Some(l) = stated.tokens_per_window {
                st.stated_tokens = Some(l);
            }
            if let Some(l) = stated.per_day {
                st.learned_day_limit = Some(l);
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
                    working_per_window: v.st.working.map(|(w, _)| w),
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
