//! One pool's limiter state in one process, and the window arithmetic every rule of it uses:
//! which limits are in force (stated over configured, a working limit after a miss) and what a
//! stated reset says of the provider's kind of window, as `pace.lua`'s `settle` and `learn`.

use crate::pace::fair::FairQueue;
use crate::pace::{LimitSource, Limits, WINDOW_GUARD_MS};
use std::collections::BTreeMap;

/// One pool's limiter state.
#[derive(Debug, Default)]
pub(super) struct State {
    /// Fixed windows: (calls, tokens) counted per window index.
    pub(super) counts: BTreeMap<u64, (u32, u64)>,
    /// Fixed windows: calls counted in a window only because they were admitted at the end of
    /// the one before.
    pub(super) tails: BTreeMap<u64, u32>,
    /// Rolling windows: the theoretical arrival time of calls and of tokens, ms.
    pub(super) tat: f64,
    pub(super) token_tat: f64,
    pub(super) day_end_ms: u64,
    pub(super) day_used: u32,
    pub(super) day_tokens: u64,
    /// What the provider stated: requests and tokens per window, requests per day (or the
    /// quota endpoint's, or what a day refusal showed).
    pub(super) stated_window: Option<u32>,
    pub(super) stated_tokens: Option<u32>,
    pub(super) learned_day_limit: Option<u32>,
    /// Where each of those three came from.
    pub(super) window_from: Option<LimitSource>,
    pub(super) tokens_from: Option<LimitSource>,
    pub(super) day_from: Option<LimitSource>,
    /// Where fixed windows start, ms past the epoch's.
    pub(super) phase: u64,
    /// The working per-window limit a miss lowered, and the window from which it holds.
    pub(super) working: Option<(u32, u64)>,
    /// Requests per window learned by counting: the calls counted in the window a refusal
    /// closed, when no limit was stated or configured.
    pub(super) counted_window: Option<u32>,
    /// Whether the window's limit in force is [`State::counted_window`] (set by
    /// [`State::in_force`]).
    pub(super) counted_in_force: bool,
    pub(super) learned_at: Option<u64>,
    /// A pool declared rolling whose provider said where its window ends.
    pub(super) learned_fixed: bool,
    /// The provider's window slides: a reset it stated moved on by less than a window.
    pub(super) learned_sliding: bool,
    /// The latest reset the provider stated as a moment (epoch ms).
    pub(super) last_reset_ms: u64,
    /// A sliding window's log: the moments its calls are made (reserved ones included), sorted.
    pub(super) log: Vec<u64>,
    pub(super) misses: u32,
    /// The runs waiting their turn, and the slots granted to some of them.
    pub(super) fair: FairQueue,
}

impl State {
    /// The limits in force (as `pace.lua`'s `settle`): stated ones replace configured ones
    /// unless pinned, and a working limit caps the window's, recovering by one a window.
    pub(super) fn in_force(&mut self, configured: &Limits, now: u64) -> Limits {
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
        // Nobody stated a limit: what a refusal showed by counting is the limit.
        self.counted_in_force = limits.per_window.is_none() && self.counted_window.is_some();
        if self.counted_in_force {
            limits.per_window = self.counted_window;
        }
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
    pub(super) fn learn_kind(&mut self, ends_in_ms: Option<u64>, declared: &Limits, now: u64) {
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
pub(super) fn span(win: u64) -> u64 {
    win + WINDOW_GUARD_MS
}

/// The fixed window of `win` ms starting `phase` ms past the epoch's that `t` falls in.
pub(super) fn window_of(t: u64, win: u64, phase: u64) -> u64 {
    (t + win - phase % win) / win - 1
}
