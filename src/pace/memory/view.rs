//! One call's view of one pool at one moment: the rules of `pace.lua` (admit, reserve, count,
//! learn from an answer, lower the working limit on a miss) applied to the pool's [`State`]. The
//! pacer takes the lock and the time, then asks a view.

use super::state::{State, span, window_of};
use crate::pace::{
    LimitSource, Limits, Slot, Stated, WINDOW_GUARD_MS, Waiter, rolling_emission_ms,
};
use std::collections::BTreeMap;

/// One call's view of a pool: its state, the time, the limits it is asked with and the call's
/// tokens (0 when the pool does not count them).
pub(super) struct View<'a> {
    pub(super) st: &'a mut State,
    pub(super) now: u64,
    /// The limits in force: the configured ones with what was learned.
    pub(super) limits: Limits,
    pub(super) cost: u64,
}

impl View<'_> {
    pub(super) fn win(&self) -> u64 {
        self.limits.window_ms.max(1)
    }

    pub(super) fn window(&self) -> u64 {
        window_of(self.now, self.win(), self.st.phase)
    }

    /// Where fixed window `x` starts.
    pub(super) fn start(&self, x: u64) -> u64 {
        x * self.win() + self.st.phase
    }

    /// Whether windows are fixed and limit something.
    pub(super) fn windowed(&self) -> bool {
        !self.limits.rolling
            && (self.limits.per_window.is_some() || self.limits.tokens_per_window.is_some())
    }

    /// Whether calls are counted by window: fixed windows that limit something, and any pool
    /// that limits its calls by nothing yet (rolling ones on the epoch's windows), so that a
    /// refusal can show how many calls it took.
    pub(super) fn counting(&self) -> bool {
        self.windowed() || self.limits.per_window.is_none()
    }

    pub(super) fn used_in(&self, w: u64) -> (u32, u64) {
        self.st.counts.get(&w).copied().unwrap_or((0, 0))
    }

    /// Whether a window of the provider's that ends `ends_ms` from now (`None`: not said) is
    /// the current one (as `pace.lua`'s `current`): one that ends by the guard after the
    /// current window began is the one before, though the phases agree within the guard.
    pub(super) fn current(&self, ends_ms: Option<u64>) -> bool {
        ends_ms.is_none_or(|ends| self.now + ends > self.start(self.window()) + WINDOW_GUARD_MS)
    }

    /// Whether fixed window `w` has room for this call and its tokens.
    pub(super) fn room(&self, w: u64) -> bool {
        let (calls, tokens) = self.used_in(w);
        let calls_ok = self.limits.per_window.is_none_or(|limit| calls < limit);
        let tokens_ok = match self.limits.tokens_per_window {
            Some(limit) if self.cost > 0 => tokens == 0 || tokens + self.cost <= u64::from(limit),
            _ => true,
        };
        calls_ok && tokens_ok
    }

    pub(super) fn free_from(&self, mut w: u64) -> u64 {
        while !self.room(w) {
            w += 1;
        }
        w
    }

    /// Whether a call now may reach the provider in the next fixed window (see
    /// [`WINDOW_GUARD_MS`]).
    pub(super) fn tail(&self) -> bool {
        self.windowed() && self.start(self.window() + 1) - self.now <= WINDOW_GUARD_MS
    }

    pub(super) fn day_full(&self) -> bool {
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

    pub(super) fn emission(&self, limit: u32) -> f64 {
        self.win() as f64 / f64::from(limit)
    }

    /// The spacing of a rolling window's calls (see [`rolling_emission_ms`]).
    pub(super) fn call_emission(&self, limit: u32) -> f64 {
        rolling_emission_ms(self.win(), limit)
    }

    /// A rolling window of `limit` refused a call: no slot until the refusal's hint when it
    /// gave one (the provider's bucket may be a fraction of a call short, not empty), else for
    /// one spacing; then spaced.
    pub(super) fn refused_rolling(&mut self, limit: u32, hint_ms: Option<u64>) {
        let emission = self.call_emission(limit);
        let next_at = match hint_ms.filter(|&ms| ms > 0) {
            Some(ms) => (self.now + ms) as f64,
            None => self.now as f64 + emission,
        };
        let tat = (next_at + f64::from(limit.saturating_sub(1)) * emission).ceil();
        self.st.tat = self.tat().max(tat);
    }

    pub(super) fn tat(&self) -> f64 {
        self.st.tat.max(self.now as f64)
    }

    /// Whether the pool is paced by a sliding window's log.
    pub(super) fn sliding(&self) -> bool {
        self.st.learned_sliding && !self.limits.pin
    }

    /// Whether calls' moments are logged: the provider states moments, or its window slides.
    pub(super) fn logs(&self) -> bool {
        self.limits.per_window.is_some() && (self.sliding() || self.st.last_reset_ms > 0)
    }

    /// Ms until a sliding window has a slot (as `pace.lua`'s `slide_wait`).
    pub(super) fn slide_wait(&self, limit: u32) -> u64 {
        let limit = limit as usize;
        match self.st.log.len().checked_sub(limit) {
            Some(i) => (self.st.log[i] + span(self.win())).saturating_sub(self.now),
            None => 0,
        }
    }

    pub(super) fn log_at(&mut self, at: u64) {
        let i = self.st.log.partition_point(|&m| m <= at);
        self.st.log.insert(i, at);
    }

    /// The provider counts `limit - left` calls in its sliding window and frees its next slot
    /// at `at` (as `pace.lua`'s `slide_fill`).
    pub(super) fn slide_fill(&mut self, at: u64, left: u32, limit: u32) {
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

    pub(super) fn token_tat(&self) -> f64 {
        self.st.token_tat.max(self.now as f64)
    }

    /// Ms until a rolling window admits this call and its tokens (0: now).
    pub(super) fn rolling_wait(&self) -> u64 {
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
    pub(super) fn slot(&self, day_end_ms: u64) -> Slot {
        if self.day_full() {
            return Slot::In(day_end_ms.saturating_sub(self.now).max(1));
        }
        match self.wait() {
            0 => Slot::Now,
            ms => Slot::In(ms),
        }
    }

    /// Ms until the pool has room (0: now).
    pub(super) fn wait(&self) -> u64 {
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
    pub(super) fn admit_now(&mut self) {
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
    pub(super) fn valid_until(&self) -> u64 {
        if self.windowed() {
            self.start(self.window() + 1)
        } else {
            self.now + self.win()
        }
    }

    /// Grant the room there is now to the runs next in line, at most `max` (as `pace.lua`'s
    /// `dispatch`).
    pub(super) fn dispatch(&mut self, max: u32) {
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
    pub(super) fn fair_wait(&self, ahead: u64) -> u64 {
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
    pub(super) fn granted(&mut self, who: Option<&Waiter<'_>>, take: bool) -> Option<u64> {
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
    pub(super) fn turn(&self, who: Option<&Waiter<'_>>) -> Option<Slot> {
        let who = who?;
        if self.st.fair.waiting() == 0 {
            return None;
        }
        Some(Slot::In(self.fair_wait(self.st.fair.ahead(who)).max(1)))
    }

    /// What the provider stated, as `pace.lua`'s `learn` takes it in (the limits themselves
    /// are already in force).
    pub(super) fn take_in(&mut self, stated: &Stated) {
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
                    self.st.day_from = Some(LimitSource::Counted);
                    learned
                }
            };
            self.st.day_used = self.st.day_used.max(limit);
        }
    }

    /// Realign fixed windows to start `phase` ms past the epoch's: each count moves to the
    /// window where its calls are made (the current one's stays current, a held slot's goes to
    /// the window its holder wakes in); tails count in full.
    pub(super) fn realign(&mut self, phase: u64) {
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
    pub(super) fn count(&mut self, w: u64, wait: u64) {
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
            if self.counting() {
                self.st.counts.entry(w).or_default().0 += 1;
            }
        } else if self.counting() {
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
