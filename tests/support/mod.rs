//! Shared set-up for the integration tests: a real Redis (REDIS_URL, started by
//! `scripts/test.sh`), a namespace per test so tests run in parallel, and engines wired to it.
#![allow(dead_code)]

use async_trait::async_trait;
use freeway::clock::{Clock, InstantClock};
use freeway::engine::{Engine, EnvTargets, Targets};
use freeway::events::{Event, EventError, EventSink};
use freeway::provider::{ApiKey, ChatProvider};
use freeway::rest::Rests;
use freeway::store::{MemoryStore, Store};
use freeway::tools::ToolRunner;
use redis::aio::ConnectionManager;
use std::sync::{Arc, Mutex};

pub fn redis_url() -> String {
    std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_string())
}

pub async fn redis() -> ConnectionManager {
    freeway::connect::redis(&redis_url())
        .await
        .expect("tests need Redis: run scripts/test.sh or set REDIS_URL")
}

pub fn unique_ns(prefix: &str) -> String {
    format!(
        "t-{prefix}-{}",
        ulid::Ulid::generate().to_string().to_lowercase()
    )
}

/// Every event published, in order, per run.
#[derive(Default)]
pub struct RecordedEvents(pub Mutex<Vec<(String, Event)>>);

impl RecordedEvents {
    pub fn of(&self, run_id: &str) -> Vec<Event> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter(|(r, _)| r == run_id)
            .map(|(_, e)| e.clone())
            .collect()
    }
}

#[async_trait]
impl EventSink for RecordedEvents {
    async fn publish(&self, run_id: &str, event: &Event) -> Result<(), EventError> {
        self.0
            .lock()
            .unwrap()
            .push((run_id.to_string(), event.clone()));
        Ok(())
    }
}

/// An engine on a real Redis namespace, an in-memory store and recorded events.
pub struct Harness {
    pub engine: Engine,
    pub store: Arc<MemoryStore>,
    pub events: Arc<RecordedEvents>,
    pub clock: Arc<InstantClock>,
    pub rests: Rests,
    pub conn: ConnectionManager,
    pub ns: String,
}

pub async fn harness(prefix: &str, provider: Arc<dyn ChatProvider>, base_url: &str) -> Harness {
    harness_in(&unique_ns(prefix), redis().await, provider, base_url).await
}

pub async fn harness_in(
    ns: &str,
    conn: ConnectionManager,
    provider: Arc<dyn ChatProvider>,
    base_url: &str,
) -> Harness {
    let ns = ns.to_string();
    let store = Arc::new(MemoryStore::default());
    let events = Arc::new(RecordedEvents::default());
    let clock = Arc::new(InstantClock::default());
    let rests = Rests::new(conn.clone(), ns.clone());
    let targets: Arc<dyn Targets> = Arc::new(EnvTargets {
        openrouter_base_url: base_url.to_string(),
        platform_key: Some(ApiKey::new("sk-or-v1-platform-test")),
    });
    let engine = Engine {
        provider,
        store: store.clone() as Arc<dyn Store>,
        events: events.clone() as Arc<dyn EventSink>,
        rests: rests.clone(),
        clock: clock.clone() as Arc<dyn Clock>,
        targets,
        tools: ToolRunner::new(None).unwrap(),
        summary: false,
        leases: freeway::lease::Leases::new(conn.clone(), ns.clone()),
        worker: "test-worker".into(),
    };
    Harness {
        engine,
        store,
        events,
        clock,
        rests,
        conn,
        ns,
    }
}
