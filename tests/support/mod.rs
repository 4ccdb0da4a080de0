//! Shared set-up for the engine's integration tests: an engine on the in-process fleet (rests,
//! leases, events and counters in memory, on a clock tests can move), an in-memory store, and a
//! provider the test chooses, usually the simulator over real HTTP. No Redis: the Redis
//! implementations of the fleet's parts have their own suite (`tests/fleet/rests.rs`).
#![allow(dead_code, unused_macros)]

pub(crate) mod skip;
pub(crate) mod tool_service;

use freeway::clock::{Clock, InstantClock};
use freeway::engine::Engine;
use freeway::events::{EventSink, MemoryEvents};
use freeway::fleet::Fleet;
use freeway::lease::MemoryLeases;
use freeway::metrics::MemoryMetrics;
use freeway::pace::MemoryPacer;
use freeway::provider::{ApiKey, ChatProvider, EnvTargets, Targets};
use freeway::rest::{MemoryRests, Rests};
use freeway::spend::MemoryLedger;
use freeway::store::{MemoryStore, Store};
use freeway::tools::ToolRunner;
use freeway::unsaved::MemoryUnsaved;
use std::sync::Arc;

/// An engine and every part of it a test may look into.
pub(crate) struct Harness {
    pub engine: Engine,
    /// The keys `engine` looks up.
    pub targets: Arc<dyn Targets>,
    pub parts: Parts,
}

/// What the harness's engines are made of.
pub(crate) struct Parts {
    pub provider: Arc<dyn ChatProvider>,
    pub store: Arc<MemoryStore>,
    pub events: Arc<MemoryEvents>,
    pub clock: Arc<InstantClock>,
    pub rests: Arc<MemoryRests>,
    pub leases: Arc<MemoryLeases>,
    pub metrics: Arc<MemoryMetrics>,
    pub pace: Arc<MemoryPacer>,
    pub spend: Arc<MemoryLedger>,
    pub unsaved: Arc<MemoryUnsaved>,
}

impl std::ops::Deref for Harness {
    type Target = Parts;
    fn deref(&self) -> &Parts {
        &self.parts
    }
}

/// The platform key the harness's targets send.
pub(crate) const PLATFORM_KEY: &str = "sk-or-v1-platform-test";

/// A harness calling `provider` with OpenRouter at `base_url` and the platform key.
pub(crate) fn harness(provider: Arc<dyn ChatProvider>, base_url: &str) -> Harness {
    let clock = Arc::new(InstantClock::default());
    let rests = Arc::new(MemoryRests::new(clock.clone()));
    harness_with(provider, base_url, clock, rests)
}

/// A harness whose rests (and their clock) the caller also holds: another replica's writes.
pub(crate) fn harness_with(
    provider: Arc<dyn ChatProvider>,
    base_url: &str,
    clock: Arc<InstantClock>,
    rests: Arc<MemoryRests>,
) -> Harness {
    let targets: Arc<dyn Targets> = Arc::new(EnvTargets::openrouter(
        base_url,
        Some(ApiKey::new(PLATFORM_KEY)),
    ));
    let leases = Arc::new(MemoryLeases::new(clock.clone()));
    let pace = Arc::new(MemoryPacer::new(clock.clone()));
    let spend = Arc::new(MemoryLedger::new(clock.clone()));
    let parts = Parts {
        provider,
        store: Arc::new(MemoryStore::default()),
        events: Arc::new(MemoryEvents::default()),
        clock,
        rests,
        pace,
        spend,
        leases,
        metrics: Arc::new(MemoryMetrics::default()),
        unsaved: Arc::new(MemoryUnsaved::default()),
    };
    Harness {
        engine: parts.engine_with(targets.clone()),
        targets,
        parts,
    }
}

impl Parts {
    /// The fleet the engine shares: the harness's own parts.
    pub(crate) fn fleet(&self) -> Fleet {
        Fleet {
            rests: self.rests.clone() as Arc<dyn Rests>,
            leases: self.leases.clone(),
            events: self.events.clone() as Arc<dyn EventSink>,
            metrics: self.metrics.clone(),
            pace: self.pace.clone(),
            spend: self.spend.clone(),
            unsaved: self.unsaved.clone(),
        }
    }

    /// An engine on this harness's parts that looks keys up in `targets`.
    pub(crate) fn engine_with(&self, targets: Arc<dyn Targets>) -> Engine {
        self.engine_on(targets, self.fleet())
    }

    /// An engine on this harness's store and clock that shares `fleet`.
    pub(crate) fn engine_on(&self, targets: Arc<dyn Targets>, fleet: Fleet) -> Engine {
        Engine::new(
            self.provider.clone(),
            targets,
            self.store.clone() as Arc<dyn Store>,
            fleet,
        )
        .with_clock(self.clock.clone() as Arc<dyn Clock>)
        .with_tools(ToolRunner::default())
        .named("test-worker")
    }
}

/// A namespace of its own for one test, so tests share one Redis without seeing each other.
pub(crate) fn unique_ns(prefix: &str) -> String {
    let id = ulid::Ulid::generate().to_string().to_lowercase();
    format!("t-{prefix}-{id}")
}

/// Run each named suite function on both implementations of the fleet's parts: as
/// `in_memory::NAME` on `Fixture::memory()` and as `in_redis::NAME` on `Fixture::redis()`,
/// `Fixture` being the calling file's.
macro_rules! on_both {
    ($($name:ident),* $(,)?) => {
        mod in_memory {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(super::Fixture::memory()).await
                }
            )*
        }
        mod in_redis {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    if let Some(fixture) = super::Fixture::redis().await {
                        super::$name(fixture).await
                    }
                }
            )*
        }
    };
}
