//! The `/_sim/` control API: reset, clock, live config, call-log queries.

use crate::common;

use common::*;
use serde_json::json;
use sim::SimConfig;

#[tokio::test]
async fn reset_clears_counters_faults_log_and_clock() {
    let sim = start(SimConfig {
        rpm: 1,
        ..SimConfig::default()
    })
    .await;
    let client = client();
    let real = sim.advance_clock(0);
    sim.advance_clock(10 * DAY_MS);
    chat(&client, &sim, KEY, &body(FREE, "hi", false)).await;
    inject(&client, &sim, json!({"kind": "server_500"})).await;
    assert_eq!(sim.calls().len(), 1);

    let (status, v) = control(&client, &sim, "POST", "reset", None).await;
    assert_eq!((status, v), (200, json!({"reset": true})));
    assert!(sim.calls().is_empty());
    let (_, faults) = control(&client, &sim, "GET", "faults", None).await;
    assert_eq!(faults, json!([]));
    let (_, clock) = control(&client, &sim, "GET", "clock", None).await;
    let now = clock["now_ms"].as_u64().expect("now_ms");
    assert!(now < real + DAY_MS, "the offset is gone");
    let (status, _, _) = chat(&client, &sim, KEY, &body(FREE, "hi", false)).await;
    assert_eq!(status, 200, "counters and faults are gone");
    sim.shutdown().await;
}

#[tokio::test]
async fn the_clock_advances_on_request() {
    let sim = start(SimConfig::default()).await;
    let client = client();
    let (_, before) = control(&client, &sim, "GET", "clock", None).await;
    let (status, after) = control(
        &client,
        &sim,
        "POST",
        "clock",
        Some(json!({"advance_ms": 3_600_000})),
    )
    .await;
    assert_eq!(status, 200);
    let (before, after) = (
        before["now_ms"].as_u64().expect("ms"),
        after["now_ms"].as_u64().expect("ms"),
    );
    assert!(
        after >= before + 3_600_000 && after < before + 3_700_000,
        "{before} -> {after}"
    );

    for bad in [
        json!({}),
        json!({"advance_ms": -5}),
        json!({"advance_ms": 1, "x": 2}),
    ] {
        let (status, v) = control(&client, &sim, "POST", "clock", Some(bad.clone())).await;
        assert_eq!(status, 400, "{bad}");
        assert_eq!(v["error"]["code"], json!("invalid_request"));
    }
    sim.shutdown().await;
}

#[tokio::test]
async fn quotas_and_shape_change_at_runtime() {
    let sim = start(SimConfig::default()).await;
    fresh_day(&sim);
    let client = client();
    let (status, v) = control(&client, &sim, "GET", "config", None).await;
    assert_eq!(status, 200);
    assert_eq!(
        v,
        json!({"rpm": 20, "rpd": 50, "window_s": 60, "window_align": "epoch", "window_kind": "fixed",
               "state_limits": false, "latency_ms": 0, "token_rate": 0, "shape": "2026",
               "high_balance": false, "mode": "openrouter", "groq_rpm": 30, "groq_rpd": 1000, "gemini_rpm": 10,
               "gemini_rpd": 250, "generic_rpm": 0, "keepalive_comments": 2, "usage_cost": "asked", "log_cap": 1_000_000})
    );

    let (status, v) = control(
        &client,
        &sim,
        "POST",
        "config",
        Some(json!({"rpm": 1, "shape": "2025", "window_s": 10})),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(
        (v["rpm"].clone(), v["shape"].clone(), v["window_s"].clone()),
        (json!(1), json!("2025"), json!(10))
    );

    chat(&client, &sim, KEY, &body(FREE, "hi", false)).await;
    let (status, headers, text) = chat(&client, &sim, KEY, &body(FREE, "hi", false)).await;
    assert_eq!(status, 429);
    assert_eq!(header(&headers, "x-ratelimit-limit"), Some("1"));
    let reset: u64 = header(&headers, "x-ratelimit-reset")
        .and_then(|r| r.parse().ok())
        .expect("reset");
    assert_eq!(reset % 10_000, 0, "windows follow the new window_s");
    assert_eq!(
        parse(&text)["error"]["message"],
        json!("Rate limit exceeded: free-models-per-min.")
    );

    let (status, v) = control(
        &client,
        &sim,
        "POST",
        "config",
        Some(json!({"high_balance": true})),
    )
    .await;
    assert_eq!((status, v["high_balance"].clone()), (200, json!(true)));
    let info = key_info(&client, &sim, KEY).await;
    assert_eq!(
        info["data"]["free_model_daily_requests"]["limit"],
        json!(1000)
    );

    for (bad, expected) in [
        (
            json!({"window_s": 0}),
            "window_s must be between 1 and 86400",
        ),
        (json!({"mode": "groq"}), "unknown field `mode`"),
        (json!({"rpm": "many"}), "invalid type"),
    ] {
        let (status, v) = control(&client, &sim, "POST", "config", Some(bad.clone())).await;
        assert_eq!(status, 400, "{bad}");
        assert!(
            v["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains(expected)),
            "{v}"
        );
    }
    let (_, v) = control(&client, &sim, "GET", "config", None).await;
    assert_eq!(v["window_s"], json!(10), "a refused patch changes nothing");
    sim.shutdown().await;
}

#[tokio::test]
async fn call_queries_are_validated() {
    let sim = start(SimConfig::default()).await;
    let client = client();
    chat(&client, &sim, KEY, &body(PAID, "hi", false)).await;
    let (status, v) = control(&client, &sim, "GET", "calls", None).await;
    assert_eq!(status, 200);
    assert_eq!(v.as_array().map(Vec::len), Some(1));
    let (_, v) = control(&client, &sim, "GET", "calls?since_ms=99999999999999", None).await;
    assert_eq!(v, json!([]));
    for bad in ["calls?since_ms=soon", "calls?limit=3"] {
        let (status, v) = control(&client, &sim, "GET", bad, None).await;
        assert_eq!(status, 400, "{bad}");
        assert_eq!(v["error"]["code"], json!("invalid_request"));
    }
    sim.shutdown().await;
}
