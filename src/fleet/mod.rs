//! What every replica shares: rests, run leases, run events, counters, the pools' limiters,
//! spend, and the writes a store did not take.
//!
//! The engine's decisions must hold for the whole fleet at once, so it keeps this state outside
//! the process: in Redis ([`RedisFleet`], built once per process and handed to the engine, the
//! queue and the API). Each part is a trait with a Redis implementation and an in-process one
//! ([`Fleet::in_memory`]) that keeps the same rules, so the engine's rule tests, the budget
//! property test and benchmarks run without a server.

mod redis;

use crate::connect::RedisConnection;
use crate::events::{EventSink, MemoryEvents};
use crate::lease::{Leases, MemoryLeases};
use crate::metrics::{MemoryMetrics, Metrics};
use crate::pace::{MemoryPacer, Pacer};
use crate::rest::{MemoryRests, Rests};
use crate::spend::{Ledger, MemoryLedger};
use crate::unsaved::{MemoryUnsaved, Unsaved};
use std::sync::Arc;

pub use crate::error::FleetError;
pub use redis::RedisFleet;

/// The engine's handles on the fleet's shared state.
#[derive(Clone)]
pub struct Fleet {
    pub rests: Arc<dyn Rests>,
    pub leases: Arc<dyn Leases>,
    pub events: Arc<dyn EventSink>,
    pub metrics: Arc<dyn Metrics>,
    /// The pools' limiters.
    pub pace: Arc<dyn Pacer>,
    /// What tenants and runs spend on priced routes, against their caps.
    pub spend: Arc<dyn Ledger>,
    /// Runs' writes the store did not take, until it does.
    pub unsaved: Arc<dyn Unsaved>,
}

impl Fleet {
    /// The fleet's state in one Redis namespace ([`RedisFleet::fleet`] of a handle built for
    /// the purpose).
    pub fn redis(conn: &RedisConnection, ns: &str) -> Fleet {
        RedisFleet::new(conn.clone(), ns).fleet()
    }

    /// State in this process only, on the system clock: one replica's view, for tests.
    pub fn in_memory() -> Fleet {
        Fleet {
            rests: Arc::new(MemoryRests::default()),
            leases: Arc::new(MemoryLeases::default()),
            events: Arc::new(MemoryEvents::default()),
            metrics: Arc::new(MemoryMetrics::default()),
            pace: Arc::new(MemoryPacer::default()),
            spend: Arc::new(MemoryLedger::default()),
            unsaved: Arc::new(MemoryUnsaved::default()),
        }
    }
}
