//! Reading providers' quota endpoints for the fleet (docs/design.md §3.2, §4.4).
//!
//! A provider's quota endpoint says what is left of a key's day without spending a call
//! (OpenRouter's `GET /api/v1/key`: `free_model_daily_requests`). One replica of the fleet reads
//! it for each pool of the platform key once every [`DayWatch::EVERY`] and:
//!
//! - resynchronises the pool's limiter: its day counter is raised to the provider's count (other
//!   clients of the key, a day begun before a restart) and the day's limit (50, or 1,000 once
//!   credits were bought) is learned when the pool declares none, so the limiter closes the day
//!   before the provider has to refuse it;
//! - lifts a day rest when the endpoint shows `remaining > 0`: credits were bought, and the day
//!   came back before midnight. The endpoint's `used` lags the refusals by about a minute, so a
//!   day rest is lifted at the earliest one read after it was first seen.
//!
//! A pool reopened either way is returned, so the caller can wake the runs it delayed.

use crate::catalog::{Catalog, Pool};
use crate::clock::{Clock, SystemClock};
use crate::fleet::{Fleet, FleetError};
use crate::provider::{EnvTargets, HttpProvider};
use crate::rest::ActiveRest;
use std::sync::Arc;
use std::time::Duration;

/// Reads the quota endpoints of the platform key's pools.
pub struct DayWatch {
    catalog: Arc<Catalog>,
    keys: Arc<EnvTargets>,
    http: HttpProvider,
    fleet: Fleet,
    every: Duration,
    /// The day a read resynchronises is the day of this clock's now: the engine's, whose runs
    /// counted it.
    clock: Arc<dyn Clock>,
}

/// A pool the watch reopened: its day rest lifted, or its limiter's day no longer full.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lifted {
    /// The pool instance, as rests name it.
    pub pool: String,
    /// The requests the endpoint showed left today.
    pub remaining: u64,
}

impl DayWatch {
    /// How often each pool's quota endpoint is read, fleet-wide.
    pub const EVERY: Duration = Duration::from_secs(60);

    pub fn new(
        catalog: Arc<Catalog>,
        keys: Arc<EnvTargets>,
        http: HttpProvider,
        fleet: Fleet,
    ) -> Self {
        DayWatch {
            catalog,
            keys,
            http,
            fleet,
            every: Self::EVERY,
            clock: Arc::new(SystemClock),
        }
    }

    /// Read the time from `clock` instead of the system's (the engine's, in tests).
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Read each endpoint every `every` instead of [`DayWatch::EVERY`].
    pub fn every(mut self, every: Duration) -> Self {
        self.every = every;
        self
    }

    pub fn period(&self) -> Duration {
        self.every
    }

    /// One round, safe on every replica at once: each pool whose turn has come is read by
    /// exactly one replica. An endpoint that cannot be read changes nothing.
    pub async fn round(&self) -> Result<Vec<Lifted>, FleetError> {
        let rests = self.fleet.rests.list().await?;
        let mut lifted = Vec::new();
        for pool in self.catalog.pools() {
            if let Some(found) = self.check(pool, &rests).await? {
                lifted.push(found);
            }
        }
        Ok(lifted)
    }

    async fn check(&self, pool: &Pool, rests: &[ActiveRest]) -> Result<Option<Lifted>, FleetError> {
        let Some(path) = self
            .catalog
            .provider(&pool.provider)
            .and_then(|p| p.dialect.quota_path())
        else {
            return Ok(None);
        };
        // Only the operator's key is the watch's to read; a user's spent day holds until its
        // reset or the operator's clear.
        let instance = pool.platform_instance();
        let leases = &self.fleet.leases;
        let day_rest = rests.iter().find(|r| r.key == instance && r.is_day_rest());
        let first_sight = match day_rest {
            Some(rest) => {
                let lasts = Duration::from_millis(rest.remaining_ms);
                leases
                    .take_turn(&format!("day-seen:{instance}"), lasts)
                    .await?
            }
            None => false,
        };
        if !leases
            .take_turn(&format!("quota:{instance}"), self.every)
            .await?
        {
            return Ok(None);
        }
        let target = match self.keys.platform(&pool.provider) {
            Ok(target) => target,
            Err(error) => {
                tracing::debug!(pool = %instance, %error, "no key to read the quota endpoint with");
                return Ok(None);
            }
        };
        let quota = match self.http.day_quota(&target, path).await {
            Ok(quota) => quota,
            Err(error) => {
                tracing::warn!(pool = %instance, %error, "the quota endpoint could not be read");
                return Ok(None);
            }
        };
        let limits = pool.limits();
        let lift = day_rest.is_some() && !first_sight && quota.remaining > 0;
        if lift {
            // The day is back: its rest goes, and the sync below sets the day's count and
            // limit again.
            self.fleet.rests.clear("pool", &instance).await?;
            self.fleet.pace.reopen_day(&instance).await?;
        }
        let day_end = self.catalog.day_clock(pool).day_end_ms(self.clock.now_ms());
        let synced = self
            .fleet
            .pace
            .sync(&instance, &limits, day_end, quota.used, quota.limit)
            .await?;
        tracing::debug!(pool = %instance, used = quota.used, limit = quota.limit, full = synced.full, "synced the day from the quota endpoint");
        if !(lift || synced.reopened) {
            return Ok(None);
        }
        tracing::info!(
            pool = %instance,
            remaining = quota.remaining,
            limit = quota.limit,
            "the quota endpoint shows requests left today: lifted the day rest"
        );
        Ok(Some(Lifted {
            pool: instance,
            remaining: quota.remaining,
        }))
    }
}
