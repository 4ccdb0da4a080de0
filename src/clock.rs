//! Time and randomness for the engine, injectable so tests never sleep.
//!
//! The fleet's rests and leases are timed by Redis (`TIME` inside the Lua scripts); this clock
//! serves what is the replica's own business (deadlines, the one-route retry's 1–3 s pause,
//! snooze jitter) and times the in-process rests and leases of tests.

use async_trait::async_trait;
use rand::RngExt;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

#[async_trait]
pub trait Clock: Send + Sync {
    /// Milliseconds since the Unix epoch.
    fn now_ms(&self) -> u64;
    async fn sleep(&self, duration: Duration);
    /// A uniform random number of ms in `[lo, hi]`.
    fn jitter_ms(&self, lo: u64, hi: u64) -> u64;
}

/// The real clock and thread-local randomness.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

pub fn epoch_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

#[async_trait]
impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        epoch_ms()
    }
    async fn sleep(&self, duration: Duration) {
        tokio::time::sleep(duration).await;
    }
    fn jitter_ms(&self, lo: u64, hi: u64) -> u64 {
        rand::rng().random_range(lo..=hi.max(lo))
    }
}

/// A clock for tests: real time plus whatever [`InstantClock::advance`] added, sleeps return at
/// once and are recorded, and jitter is always the upper bound (the worst case for deadlines).
#[derive(Debug, Default)]
pub struct InstantClock {
    slept: Mutex<Vec<Duration>>,
    ahead_ms: AtomicU64,
    /// When set, the time it stands at instead of real time: a test that checks a boundary to
    /// the millisecond cannot count on no real millisecond passing.
    frozen_ms: Option<u64>,
}

impl InstantClock {
    /// A clock that stands at the time it was made until [`InstantClock::advance`] moves it.
    pub fn frozen() -> InstantClock {
        InstantClock {
            frozen_ms: Some(epoch_ms()),
            ..InstantClock::default()
        }
    }

    /// Every sleep requested so far.
    pub fn slept(&self) -> Vec<Duration> {
        self.slept.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// Move this clock's time forward by `by`, as if that much time had passed.
    pub fn advance(&self, by: Duration) {
        self.ahead_ms
            .fetch_add(by.as_millis() as u64, Ordering::SeqCst);
    }
}

#[async_trait]
impl Clock for InstantClock {
    fn now_ms(&self) -> u64 {
        self.frozen_ms.unwrap_or_else(epoch_ms) + self.ahead_ms.load(Ordering::SeqCst)
    }
    async fn sleep(&self, duration: Duration) {
        if let Ok(mut s) = self.slept.lock() {
            s.push(duration);
        }
    }
    fn jitter_ms(&self, _lo: u64, hi: u64) -> u64 {
        hi
    }
}
