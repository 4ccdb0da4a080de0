//! The token buckets behind `FREEWAY_RATE_LIMIT`: one per credential, refilled at its rate,
//! holding at most twice that. Kept apart from the middleware that consults them, so the
//! handlers' state can hold them without reaching into a handler's file.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

/// Buckets kept before full ones are forgotten (a signed URL per run makes many credentials).
const MAX_BUCKETS: usize = 10_000;

/// One token bucket per credential.
pub struct RateLimits {
    /// A token's rate: the web app's backend sends every user's requests with one.
    tokens: Rate,
    /// A run's signed `events_url`: one browser's reconnects.
    runs: Rate,
    buckets: Mutex<HashMap<String, Bucket>>,
}

#[derive(Clone, Copy)]
struct Rate {
    per_s: f64,
    burst: f64,
}

impl Rate {
    fn of(per_s: u32) -> Rate {
        let per_s = f64::from(per_s.max(1));
        Rate {
            per_s,
            burst: 2.0 * per_s,
        }
    }
}

struct Bucket {
    tokens: f64,
    at: Instant,
}

impl RateLimits {
    /// `per_s` requests a second per token and a hundredth of that (at least one) per run's
    /// signed URL, in bursts of up to twice the rate.
    pub fn new(per_s: u32) -> RateLimits {
        RateLimits {
            tokens: Rate::of(per_s),
            runs: Rate::of(per_s / 100),
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// Take one request of `credential`'s allowance (a role, or `run:{id}`); when none is left,
    /// the seconds until one is.
    pub fn take(&self, credential: &str) -> Result<(), u64> {
        let rate_of = |key: &str| match key.starts_with("run:") {
            true => self.runs,
            false => self.tokens,
        };
        let now = Instant::now();
        let mut buckets = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        if buckets.len() >= MAX_BUCKETS {
            buckets.retain(|key, b| {
                let rate = rate_of(key);
                b.refilled(now, rate) < rate.burst
            });
        }
        let rate = rate_of(credential);
        let bucket = buckets.entry(credential.to_string()).or_insert(Bucket {
            tokens: rate.burst,
            at: now,
        });
        bucket.tokens = bucket.refilled(now, rate);
        bucket.at = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            Ok(())
        } else {
            Err(((1.0 - bucket.tokens) / rate.per_s).ceil().max(1.0) as u64)
        }
    }
}

impl Bucket {
    fn refilled(&self, now: Instant, rate: Rate) -> f64 {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        (self.tokens + elapsed * rate.per_s).min(rate.burst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_credential_gets_its_burst_then_its_rate_and_others_are_apart() {
        let limits = RateLimits::new(5);
        for _ in 0..10 {
            assert_eq!(limits.take("api"), Ok(()));
        }
        assert_eq!(limits.take("api"), Err(1));
        assert_eq!(
            limits.take("admin"),
            Ok(()),
            "another credential has its own"
        );
        for _ in 0..2 {
            assert_eq!(limits.take("run:run_1"), Ok(()));
        }
        assert_eq!(
            limits.take("run:run_1"),
            Err(1),
            "a run's URL: a hundredth, at least 1/s"
        );
    }
}
