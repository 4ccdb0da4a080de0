//! The simulator's clock: real time plus an offset that the control API can advance.
//!
//! Every quota decision, `X-RateLimit-Reset` value and call-log timestamp reads this clock, so a
//! test can cross a per-minute window or a UTC midnight without sleeping.

use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds in a UTC day (the daily counter resets at 00:00 UTC).
pub(crate) const DAY_MS: u64 = 86_400_000;

#[derive(Debug, Default)]
pub(crate) struct Clock {
    offset_ms: u64,
}

impl Clock {
    /// Sim time in epoch milliseconds.
    pub(crate) fn now_ms(&self) -> u64 {
        real_now_ms().saturating_add(self.offset_ms)
    }

    /// Moves sim time forward; time never runs backwards, so quota counters stay monotonic.
    pub(crate) fn advance(&mut self, ms: u64) -> u64 {
        self.offset_ms = self.offset_ms.saturating_add(ms);
        self.now_ms()
    }

    pub(crate) fn reset(&mut self) {
        self.offset_ms = 0;
    }
}

fn real_now_ms() -> u64 {
    // A clock before 1970 is a broken host; treating it as the epoch keeps the server answering.
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Start of the fixed window containing `now_ms`, windows being aligned to multiples of `len_ms`.
pub(crate) fn window_start(now_ms: u64, len_ms: u64) -> u64 {
    now_ms - now_ms % len_ms
}

/// The next 00:00 UTC after `now_ms`.
pub(crate) fn next_midnight(now_ms: u64) -> u64 {
    window_start(now_ms, DAY_MS) + DAY_MS
}
