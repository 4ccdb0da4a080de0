//! One engine step, end to end in-process: a `complete` run whose single route answers at once
//! (store, pre-flight closures read from Redis, attempt counted, events, finish). Measures the
//! engine's own overhead per step; the provider is an in-process fake. Needs REDIS_URL.
//!
//! `REDIS_URL=redis://127.0.0.1:6379 cargo bench -p freeway --bench engine_step`

use async_trait::async_trait;
use criterion::{Criterion, criterion_group, criterion_main};
use freeway::budget::Kind;
use freeway::catalog::Catalog;
use freeway::engine::{Engine, WhenResting};
use freeway::events::{Event, EventError, EventSink};
use freeway::fleet::Fleet;
use freeway::job::{RunJob, RunRequest};
use freeway::provider::{
    ApiKey, CallError, ChatProvider, ChatRequest, Completion, Deltas, EnvTargets, Target,
};
use freeway::route::RouteSpec;
use freeway::store::MemoryStore;
use std::sync::Arc;

struct Instant;

#[async_trait]
impl ChatProvider for Instant {
    async fn call(
        &self,
        _t: &Target,
        _r: &ChatRequest,
        deltas: &Deltas,
    ) -> Result<Completion, CallError> {
        deltas.push("ok");
        Ok(Completion {
            text: "ok".into(),
            finish_reason: Some("stop".into()),
            ..Default::default()
        })
    }
}

struct Discard;

#[async_trait]
impl EventSink for Discard {
    async fn publish(&self, _run_id: &str, _event: &Event) -> Result<(), EventError> {
        Ok(())
    }
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let conn = rt
        .block_on(freeway::connect::redis(&url))
        .expect("the bench needs Redis (REDIS_URL)");
    let targets = Arc::new(EnvTargets::openrouter(
        "http://127.0.0.1:9",
        Some(ApiKey::new("k")),
    ));
    let fleet = Fleet {
        events: Arc::new(Discard),
        ..Fleet::redis(&conn, "bench-engine")
    };
    let engine = Engine::new(
        Arc::new(Instant),
        targets,
        Arc::new(MemoryStore::default()),
        fleet,
    )
    .named("bench");
    let request = RunRequest {
        kind: Kind::Complete,
        ..RunRequest::new(
            "u",
            "hi",
            vec![RouteSpec {
                model: "vendor/m:free".into(),
                connection: None,
                provider: None,
            }],
        )
    };
    c.bench_function("engine: one-step run (fake provider, real Redis)", |b| {
        b.iter(|| {
            let job = RunJob::new(request.clone(), freeway::clock::epoch_ms());
            let routes = job.check(&Catalog::builtin()).expect("valid");
            rt.block_on(engine.execute(&job, &routes, WhenResting::Refuse))
                .expect("run")
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
