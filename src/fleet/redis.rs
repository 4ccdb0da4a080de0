//! The fleet's state in Redis, as one handle: every shared part on the one connection a process
//! keeps, in one namespace. A process builds it once (`worker`, `producer serve`) and hands it
//! out: the engine gets its [`Fleet`] of trait objects, the queue and the API the concrete parts,
//! for what the traits do not offer (a lease's key, the limiter's view of a pool, the metrics'
//! reads). This is the one place that constructs the Redis parts, so a part is never built per
//! call and never twice with different settings.

use super::Fleet;
use crate::connect::RedisConnection;
use crate::events::RedisEvents;
use crate::lease::RedisLeases;
use crate::metrics::RedisMetrics;
use crate::pace::RedisPacer;
use crate::rest::RedisRests;
use crate::spend::RedisLedger;
use crate::unsaved::RedisUnsaved;
use std::sync::Arc;

/// The Redis side of every part of [`Fleet`], and the connection they share.
#[derive(Clone)]
pub struct RedisFleet {
    conn: RedisConnection,
    ns: Arc<str>,
    rests: Arc<RedisRests>,
    leases: Arc<RedisLeases>,
    events: Arc<RedisEvents>,
    metrics: Arc<RedisMetrics>,
    pace: Arc<RedisPacer>,
    spend: Arc<RedisLedger>,
    unsaved: Arc<RedisUnsaved>,
}

impl RedisFleet {
    /// The fleet's state in namespace `ns` (`FREEWAY_NAMESPACE`) of the Redis behind `conn`;
    /// run events are kept for their default time.
    pub fn new(conn: RedisConnection, ns: &str) -> RedisFleet {
        RedisFleet {
            rests: Arc::new(RedisRests::new(conn.clone(), ns)),
            leases: Arc::new(RedisLeases::new(conn.clone(), ns)),
            events: Arc::new(RedisEvents::new(conn.clone(), ns)),
            metrics: Arc::new(RedisMetrics::new(conn.clone(), ns)),
            pace: Arc::new(RedisPacer::new(conn.clone(), ns)),
            spend: Arc::new(RedisLedger::new(conn.clone(), ns)),
            unsaved: Arc::new(RedisUnsaved::new(conn.clone(), ns)),
            ns: ns.into(),
            conn,
        }
    }

    /// Keep a run's event stream `keep_s` after its last event (`FREEWAY_EVENTS_KEEP_S`).
    pub fn keeping_events(mut self, keep_s: u64) -> RedisFleet {
        self.events = Arc::new(RedisEvents::clone(&self.events).keeping(keep_s));
        self
    }

    /// The engine's view: the same parts, as the traits it decides through.
    pub fn fleet(&self) -> Fleet {
        Fleet {
            rests: self.rests.clone(),
            leases: self.leases.clone(),
            events: self.events.clone(),
            metrics: self.metrics.clone(),
            pace: self.pace.clone(),
            spend: self.spend.clone(),
            unsaved: self.unsaved.clone(),
        }
    }

    /// The rests of routes, pools and providers.
    pub fn rests(&self) -> &RedisRests {
        &self.rests
    }

    /// The runs' leases, cancellations and the fleet's turns at its chores.
    pub fn leases(&self) -> &RedisLeases {
        &self.leases
    }

    /// The runs' event streams.
    pub fn events(&self) -> &RedisEvents {
        &self.events
    }

    /// The fleet's counters.
    pub fn metrics(&self) -> &RedisMetrics {
        &self.metrics
    }

    /// The pools' limiters.
    pub fn pacer(&self) -> &RedisPacer {
        &self.pace
    }

    /// What tenants and runs spend on priced routes, against their caps.
    pub fn ledger(&self) -> &RedisLedger {
        &self.spend
    }

    /// Runs' writes the store did not take, until it does.
    pub fn unsaved(&self) -> &RedisUnsaved {
        &self.unsaved
    }

    /// The Redis namespace (`FREEWAY_NAMESPACE`).
    pub fn namespace(&self) -> &str {
        &self.ns
    }

    /// The shared connection (never for blocking commands: they would hold up every part).
    pub fn connection(&self) -> RedisConnection {
        self.conn.clone()
    }
}
