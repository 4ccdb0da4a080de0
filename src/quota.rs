//! Lifting a spent day early when the provider's quota endpoint shows requests left
//! (docs/design.md §3.4).
//!
//! A day refusal rests its pool until the day clock's midnight, so no chat call is spent probing
//! a closed day. The day can come back sooner: on OpenRouter, buying credits raises the free
//! requests of the same day from 50 to 1,000. The provider says so without spending a call, in
//! its quota endpoint, so while a day rest lasts one replica of the fleet reads that endpoint
//! every [`DayWatch::EVERY`] and lifts the rest when it shows `remaining > 0`.
//!
//! The first read waits one period after the rest is first seen: the endpoint's `used` lags the
//! refusals by about a minute, and a read at once could show the spent day as open.

use crate::catalog::Catalog;
use crate::fleet::{Fleet, FleetError};
use crate::provider::{EnvTargets, HttpProvider};
use crate::rest::ActiveRest;
use crate::route::Connection;
use std::sync::Arc;
use std::time::Duration;

/// Watches the fleet's day rests on pools whose provider has a quota endpoint.
pub struct DayWatch {
    catalog: Arc<Catalog>,
    keys: Arc<EnvTargets>,
    http: HttpProvider,
    fleet: Fleet,
    every: Duration,
}

/// A day rest the watch lifted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lifted {
    /// The pool instance, as rests name it.
    pub pool: String,
    /// The requests the endpoint showed left today.
    pub remaining: u64,
}

impl DayWatch {
    /// How often a spent day's quota endpoint is read, fleet-wide.
    pub const EVERY: Duration = Duration::from_secs(300);

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
        }
    }

    /// Read each endpoint every `every` instead of [`DayWatch::EVERY`].
    pub fn every(mut self, every: Duration) -> Self {
        self.every = every;
        self
    }

    pub fn period(&self) -> Duration {
        self.every
    }

    /// One round, safe on every replica at once: each day rest whose turn has come is checked
    /// by exactly one replica. Returns the rests it lifted; the caller wakes the runs they
    /// delayed. A quota endpoint that cannot be read leaves the rest as it is.
    pub async fn round(&self) -> Result<Vec<Lifted>, FleetError> {
        let mut lifted = Vec::new();
        for rest in self.fleet.rests.list().await? {
            if let Some(found) = self.check(&rest).await? {
                lifted.push(found);
            }
        }
        Ok(lifted)
    }

    async fn check(&self, rest: &ActiveRest) -> Result<Option<Lifted>, FleetError> {
        if !rest.is_day_rest() {
            return Ok(None);
        }
        // Only the operator's key is the watch's to use; a user's spent day holds until its
        // reset or the operator's clear.
        let Some((pool, Connection::Platform)) = self.catalog.pool_instance(&rest.key) else {
            return Ok(None);
        };
        let Some(path) = self
            .catalog
            .provider(&pool.provider)
            .and_then(|p| p.dialect.quota_path())
        else {
            return Ok(None);
        };
        let leases = &self.fleet.leases;
        let first_sight = leases
            .take_turn(
                &format!("day-seen:{}", rest.key),
                Duration::from_millis(rest.remaining_ms),
            )
            .await?;
        let turn = leases
            .take_turn(&format!("quota:{}", rest.key), self.every)
            .await?;
        if first_sight || !turn {
            return Ok(None);
        }
        let target = match self.keys.platform(&pool.provider) {
            Ok(target) => target,
            Err(error) => {
                tracing::debug!(pool = %rest.key, %error, "no key to read the quota endpoint with");
                return Ok(None);
            }
        };
        let quota = match self.http.day_quota(&target, path).await {
            Ok(quota) => quota,
            Err(error) => {
                tracing::warn!(pool = %rest.key, %error, "the quota endpoint could not be read; the day rest holds");
                return Ok(None);
            }
        };
        if quota.remaining == 0 {
            tracing::debug!(pool = %rest.key, used = quota.used, limit = quota.limit, "the day is still spent");
            return Ok(None);
        }
        let removed = self.fleet.rests.clear("pool", &rest.key).await?;
        self.fleet.pace.reopen(&rest.key).await?;
        tracing::info!(
            pool = %rest.key,
            remaining = quota.remaining,
            limit = quota.limit,
            removed,
            "the quota endpoint shows requests left today: lifted the day rest"
        );
        Ok(removed.then(|| Lifted {
            pool: rest.key.clone(),
            remaining: quota.remaining,
        }))
    }
}
