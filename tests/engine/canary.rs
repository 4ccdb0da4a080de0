//! Canaries (docs/design.md §4.6): one tiny call per provider and period, as any call is made
//! (a slot of its pool, classified, its rests written, counted), recorded in the attempt log as
//! kind `canary`, and never while its route is closed. The engine calls the simulator over real
//! HTTP; the fleet is in process, moved in time by its clock. The one-per-fleet rule across
//! replicas is tested with real worker processes in `worker/tests/queue_e2e.rs`.

use crate::support;

use freeway::canary::{Canary, plan};
use freeway::catalog::Catalog;
use freeway::classify::{RestLength, RestScope, Verdict};
use freeway::clock::Clock;
use freeway::metrics::Metrics;
use freeway::pace::Pacer;
use freeway::provider::{HttpProvider, Timeouts};
use freeway::rest::Rests;
use freeway::route::OPENROUTER_FREE_POOL;
use freeway::store::Store;
use std::sync::Arc;
use std::time::Duration;

const PERIOD: Duration = Duration::from_secs(3600);

/// The built-in catalog's canary (OpenRouter's free router, on the free pool), once an hour.
fn hourly() -> Vec<Canary> {
    let (mut canaries, _) = plan(&Catalog::builtin());
    for c in &mut canaries {
        c.every = PERIOD;
    }
    canaries
}

async fn start() -> (sim::SimHandle, support::Harness) {
    let sim = sim::start(sim::SimConfig::default(), "127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let provider = Arc::new(HttpProvider::new(Timeouts::default()).unwrap());
    let h = support::harness(provider, &sim.base_url());
    (sim, h)
}

/// Let the period end on the harness's clock.
fn period_ends(h: &support::Harness) {
    h.clock.advance(PERIOD + Duration::from_secs(1));
}

#[tokio::test]
async fn a_canary_is_one_tiny_call_per_period_through_the_limiter_and_in_the_attempt_log() {
    let (sim, h) = start().await;
    let canaries = hourly();
    assert!(
        h.engine.canaries(&canaries).await.unwrap().is_empty(),
        "the first round starts the first period"
    );
    assert!(h.engine.canaries(&canaries).await.unwrap().is_empty());
    assert_eq!(sim.calls().len(), 0, "a starting fleet spends nothing");

    period_ends(&h);
    let sent = h.engine.canaries(&canaries).await.unwrap();
    assert_eq!(sent.len(), 1);
    let calls = sim.calls();
    assert_eq!(calls.len(), 1);
    let call = &calls[0];
    assert_eq!(call.model, "openrouter/free");
    assert_eq!(call.key, support::PLATFORM_KEY);
    assert_eq!(
        (call.max_tokens, call.stream, call.status),
        (Some(1), false, 200)
    );

    let stored = h.store.last_canaries().await.unwrap();
    assert_eq!(stored, sent, "the store keeps what was sent");
    let a = &stored[0].attempt;
    assert_eq!(stored[0].provider, "openrouter");
    assert_eq!((a.http_status, a.verdict, a.step), (Some(200), None, 0));
    assert_eq!(a.route, "platform:openrouter/openrouter/free");
    assert!(
        h.store
            .list_runs(&Default::default(), None, 10)
            .await
            .unwrap()
            .runs
            .is_empty(),
        "a canary is no run"
    );

    let route = &canaries[0].route;
    let limits = route.pace.expect("the free pool is paced");
    let day_end = route.day.day_end_ms(h.clock.now_ms());
    let used = h
        .pace
        .usage(OPENROUTER_FREE_POOL, &limits, day_end)
        .await
        .unwrap();
    assert_eq!(used.window_used, 1, "the canary took a slot of its pool");
    let counters = h.metrics.read().await.unwrap();
    let counted: Vec<_> = counters
        .calls
        .iter()
        .map(|c| (c.labels[1].as_str(), c.value))
        .collect();
    assert_eq!(counted, [("ok", 1)]);
    assert!(counters.canary_failures.is_empty());

    assert!(
        h.engine.canaries(&canaries).await.unwrap().is_empty(),
        "one per period"
    );
    period_ends(&h);
    assert_eq!(h.engine.canaries(&canaries).await.unwrap().len(), 1);
    assert_eq!(sim.calls().len(), 2);
}

#[tokio::test]
async fn a_refused_canary_rests_what_its_answer_calls_for_and_counts_as_a_failure() {
    let (sim, h) = start().await;
    let canaries = hourly();
    h.engine.canaries(&canaries).await.unwrap();
    let spec = serde_json::json!({"kind": "upstream_429", "model": "openrouter/free", "retry_after_s": 17});
    sim.inject(serde_json::from_value(spec).unwrap());

    period_ends(&h);
    let sent = h.engine.canaries(&canaries).await.unwrap();
    let a = &sent[0].attempt;
    assert_eq!(
        (a.http_status, a.verdict),
        (Some(429), Some(Verdict::Provider))
    );
    assert_eq!(a.retry_hint_ms, Some(17_000));
    assert!(sent[0].failed());
    let route = &canaries[0].route;
    let scope = RestScope::Route {
        pool: route.pool.clone(),
        route_key: route.key(),
    };
    let left = h.rests.remaining(&scope).await.unwrap();
    assert!(
        left.is_some_and(|ms| ms > 15_000 && ms <= 17_000),
        "the route rests for its Retry-After: {left:?}"
    );
    let counters = h.metrics.read().await.unwrap();
    let failures: Vec<_> = counters
        .canary_failures
        .iter()
        .map(|c| (c.labels.clone(), c.value))
        .collect();
    assert_eq!(
        failures,
        [(["openrouter".to_string(), "provider".to_string()], 1)]
    );
    assert_eq!(h.store.last_canaries().await.unwrap(), sent);
}

#[tokio::test]
async fn a_canary_waits_while_its_route_is_closed_and_keeps_its_turn() {
    let (sim, h) = start().await;
    let canaries = hourly();
    h.engine.canaries(&canaries).await.unwrap();
    period_ends(&h);
    let pool = RestScope::Pool(OPENROUTER_FREE_POOL.into());
    h.rests
        .write(&pool, RestLength::For(60_000), "account on the free pool")
        .await
        .unwrap();
    assert!(h.engine.canaries(&canaries).await.unwrap().is_empty());
    assert_eq!(sim.calls().len(), 0, "no call into a resting pool");

    h.clock.advance(Duration::from_secs(61));
    assert_eq!(
        h.engine.canaries(&canaries).await.unwrap().len(),
        1,
        "the period's canary goes out once the pool reopens"
    );
    assert_eq!(sim.calls().len(), 1);
}
