//! The simulator's clock: real time plus an offset that the control API can advance.
//!
//! Every quota decision, `X-RateLimit-Reset` value and call-log timestamp reads this clock, so a
//! test can cross a per-minute window or a UTC midnight without sleeping.

use chrono::Datelike;
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

/// The Pacific calendar day of `now_ms` (as days since the epoch) and the epoch ms of its end:
/// Gemini's daily quotas reset at midnight Pacific, daylight saving included.
pub(crate) fn pacific_day(now_ms: u64) -> (i64, u64) {
    use chrono::{DateTime, Days, NaiveTime, TimeZone};
    let zone = chrono_tz::America::Los_Angeles;
    let fallback = ((now_ms / DAY_MS) as i64, next_midnight(now_ms));
    let Some(now) = DateTime::from_timestamp_millis(now_ms as i64) else {
        return fallback;
    };
    let today = now.with_timezone(&zone).date_naive();
    let end = today.checked_add_days(Days::new(1)).and_then(|d| {
        zone.from_local_datetime(&d.and_time(NaiveTime::MIN))
            .earliest()
    });
    match end {
        Some(end) => (
            i64::from(today.num_days_from_ce()),
            end.timestamp_millis().max(0) as u64,
        ),
        None => fallback,
    }
}
