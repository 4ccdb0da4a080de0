//! Free-account windows that are not what a client was told: one that starts at a key's first
//! call, one that slides, and a provider that states its window on every answer.

use crate::common;

use common::*;
use reqwest::header::HeaderMap;
use serde_json::{Value, json};
use sim::{SimConfig, SimHandle, WindowAlign, WindowKind};

/// `X-RateLimit-Limit`, `-Remaining` and `-Reset` of an answer, as numbers.
fn stated(headers: &HeaderMap) -> Option<(u64, u64, u64)> {
    let num = |name| header(headers, name).and_then(|v| v.parse().ok());
    Some((
        num("x-ratelimit-limit")?,
        num("x-ratelimit-remaining")?,
        num("x-ratelimit-reset")?,
    ))
}

/// A free call's status, stated limits and body.
async fn call(
    client: &reqwest::Client,
    sim: &SimHandle,
    key: &str,
) -> (u16, Option<(u64, u64, u64)>, String) {
    let (status, headers, text) = chat(client, sim, key, &body(FREE, "hi", false)).await;
    (status, stated(&headers), text)
}

/// When the sim logged its latest call.
fn last_call_ms(sim: &SimHandle) -> u64 {
    sim.calls().last().expect("a logged call").t_ms
}

fn echoed_reset(text: &str) -> Value {
    parse(text)["error"]["metadata"]["headers"]["X-RateLimit-Reset"].clone()
}

#[tokio::test]
async fn a_first_call_window_ends_window_s_after_the_keys_first_call() {
    let sim = start(SimConfig {
        rpm: 2,
        window_align: WindowAlign::FirstCall,
        ..SimConfig::default()
    })
    .await;
    fresh_day(&sim);
    // Off the minute, so an epoch-aligned reset could not pass for the right one.
    sim.advance_clock(12_345);
    let client = client();

    assert_eq!(call(&client, &sim, KEY).await.0, 200);
    let first = last_call_ms(&sim);
    assert_eq!(call(&client, &sim, KEY).await.0, 200);
    let (status, limits, text) = call(&client, &sim, KEY).await;
    assert_eq!(status, 429);
    let end = first + 60_000;
    assert_eq!(
        limits,
        Some((2, 0, end)),
        "the 429 names the window's real end"
    );
    assert_ne!(end % 60_000, 0);
    assert_eq!(echoed_reset(&text), json!(end.to_string()));

    // Another key's window starts at its own first call.
    sim.advance_clock(5_000);
    assert_eq!(call(&client, &sim, OTHER_KEY).await.0, 200);
    let other_first = last_call_ms(&sim);
    assert_eq!(call(&client, &sim, OTHER_KEY).await.0, 200);
    let (status, limits, _) = call(&client, &sim, OTHER_KEY).await;
    assert_eq!(status, 429);
    assert_eq!(limits, Some((2, 0, other_first + 60_000)));

    // The next window opens at the first call after the last one ended, not at its end.
    let now = sim.advance_clock(0);
    sim.advance_clock(end + 7_000 - now);
    assert_eq!(call(&client, &sim, KEY).await.0, 200);
    let reopened = last_call_ms(&sim);
    assert!(reopened >= end + 7_000);
    assert_eq!(call(&client, &sim, KEY).await.0, 200);
    let (status, limits, _) = call(&client, &sim, KEY).await;
    assert_eq!(status, 429);
    assert_eq!(limits, Some((2, 0, reopened + 60_000)));

    let refused = sim.calls().iter().filter(|c| c.status == 429).count();
    assert_eq!(refused, 3);
    sim.shutdown().await;
}

#[tokio::test]
async fn a_sliding_window_serves_at_most_rpm_calls_in_any_interval() {
    let sim = start(SimConfig {
        rpm: 2,
        window_s: 10,
        window_kind: WindowKind::Sliding,
        state_limits: true,
        ..SimConfig::default()
    })
    .await;
    // One second into an epoch window of 10 s: the calls below straddle its end.
    let start = fresh_day(&sim);
    let client = client();
    let at = |ms: u64| {
        let now = sim.advance_clock(0);
        sim.advance_clock((start + ms).saturating_sub(now));
    };

    at(7_000);
    assert_eq!(call(&client, &sim, KEY).await.0, 200);
    let a = last_call_ms(&sim);
    at(8_000);
    let (status, limits, _) = call(&client, &sim, KEY).await;
    assert_eq!(status, 200);
    assert_eq!(
        limits,
        Some((2, 0, a + 10_000)),
        "full until the first call leaves"
    );
    let b = last_call_ms(&sim);

    // A new epoch window, where a fixed window would admit: both calls are still in the last 10 s.
    at(10_000);
    let (status, limits, text) = call(&client, &sim, KEY).await;
    assert_eq!(status, 429);
    assert_eq!(limits, Some((2, 0, a + 10_000)));
    assert_eq!(echoed_reset(&text), json!((a + 10_000).to_string()));

    at(a + 10_000 - start);
    let (status, limits, _) = call(&client, &sim, KEY).await;
    assert_eq!(status, 200, "the first call left the window");
    assert_eq!(limits, Some((2, 0, b + 10_000)));

    // The refusal was not counted: once the second call leaves, a slot is free.
    at(b + 10_000 - start);
    assert_eq!(call(&client, &sim, KEY).await.0, 200);

    let statuses: Vec<u16> = sim.calls().iter().map(|c| c.status).collect();
    assert_eq!(statuses, [200, 200, 429, 200, 200]);
    sim.shutdown().await;
}

#[tokio::test]
async fn a_provider_stating_its_limits_sends_them_on_every_free_answer() {
    let sim = start(SimConfig {
        rpm: 3,
        state_limits: true,
        ..SimConfig::default()
    })
    .await;
    let now = fresh_day(&sim);
    let end = now - now % 60_000 + 60_000;
    let client = client();
    for remaining in [2, 1, 0] {
        let (status, limits, _) = call(&client, &sim, KEY).await;
        assert_eq!(status, 200);
        assert_eq!(limits, Some((3, remaining, end)));
    }
    let (status, limits, _) = call(&client, &sim, KEY).await;
    assert_eq!(status, 429);
    assert_eq!(limits, Some((3, 0, end)));

    let (status, headers, _) = chat(&client, &sim, KEY, &body(PAID, "hi", false)).await;
    assert_eq!(status, 200);
    assert_eq!(stated(&headers), None, "paid models spend no free window");

    // A fault's own 429 keeps its own limit.
    sim.advance_clock(60_000);
    sim.inject(serde_json::from_value(json!({"kind": "high_demand", "limit": 8})).expect("spec"));
    let (status, limits, _) = call(&client, &sim, KEY).await;
    assert_eq!(status, 429);
    assert_eq!(limits.map(|l| l.0), Some(8));
    sim.shutdown().await;
}

#[tokio::test]
async fn window_shapes_change_at_runtime() {
    let sim = start(SimConfig::default()).await;
    fresh_day(&sim);
    let client = client();
    let patch = |body: Value| control(&client, &sim, "POST", "config", Some(body));
    let (status, v) = patch(json!({"window_align": "first-call", "state_limits": true})).await;
    assert_eq!(status, 200);
    assert_eq!(v["window_align"], json!("first-call"));
    assert_eq!(
        call(&client, &sim, KEY).await.1.map(|l| l.2),
        Some(last_call_ms(&sim) + 60_000)
    );

    let (status, v) = patch(json!({"window_kind": "sliding"})).await;
    assert_eq!((status, v["window_kind"].clone()), (200, json!("sliding")));
    for bad in [
        json!({"window_kind": "rolling"}),
        json!({"window_align": "first_call"}),
    ] {
        let (status, v) = patch(bad.clone()).await;
        assert_eq!(status, 400, "{bad}");
        assert_eq!(v["error"]["code"], json!("invalid_request"));
    }
    sim.shutdown().await;
}
