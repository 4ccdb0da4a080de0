//! Pairing free tiers by shape, as processes: `producer serve` and a worker read one
//! `FREEWAY_CONFIG` naming Groq, Gemini and a paid provider, all played by one simulator with
//! OpenRouter.
//! A chain free OpenRouter → free Groq → paid answers from Groq while OpenRouter's minute is
//! spent; `/v1/pools` and `/v1/providers` show the shapes and the rest. A provider's canary that
//! fails shows in `/v1/providers`, on the board and in `/metrics`.

use crate::common;

use common::fleet::{Fleet, Logging, config_file};
use serde_json::{Value, json};
use sim::Provider;
use std::time::Duration;

const FREE: &str = "meta-llama/llama-3.3-70b-instruct:free";

fn config(sim: &sim::SimHandle) -> Vec<(String, String)> {
    vec![
        config_file("shapes", &sim.freeway_config()),
        ("GROQ_API_KEY".into(), "gsk_fleet".into()),
        ("PAID_API_KEY".into(), "sk-paid-fleet".into()),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configured_chain_fails_over_from_openrouter_to_groq_and_the_api_shows_the_pools() {
    let sim_config = sim::SimConfig {
        rpm: 0,
        ..sim::SimConfig::default()
    };
    let Some(fleet) = Fleet::start_with("shapes", sim_config, 1, Logging::default(), |sim| {
        config(sim)
    })
    .await
    else {
        return;
    };
    let body = json!({
        "user_id": "u1",
        "input": "hello",
        "routes": [
            {"model": FREE},
            {"model": "llama-3.3-70b-versatile", "provider": "groq"},
            {"model": "gpt-4o-mini", "provider": "paid"},
        ],
    });
    let id = fleet.enqueue(body).await;
    let run = fleet.settled(&id, Duration::from_secs(40)).await;
    assert_eq!(run["status"], "succeeded", "{run}");
    let calls: Vec<(Provider, String, u16)> = fleet
        .sim
        .calls()
        .into_iter()
        .map(|c| (c.provider, c.key, c.status))
        .collect();
    assert_eq!(
        calls,
        [
            (
                Provider::OpenRouter,
                common::fleet::PLATFORM_KEY.to_string(),
                429
            ),
            (Provider::Groq, "gsk_fleet".to_string(), 200),
        ]
    );

    // A provider the file does not name is refused at enqueue, and nothing is written.
    let (status, error) = fleet
        .call(
            "POST",
            "/v1/runs",
            Some(&json!({"user_id": "u1", "input": "x", "routes": [{"model": "m", "provider": "mistral"}]})),
        )
        .await;
    assert_eq!(status, 400, "{error}");
    assert!(
        error["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("groq")),
        "{error}"
    );

    let pools = fleet.json("/v1/pools").await;
    let pool = |name: &str| -> Value {
        pools["pools"]
            .as_array()
            .and_then(|p| p.iter().find(|p| p["name"] == name))
            .cloned()
            .unwrap_or_else(|| panic!("{name} in {pools}"))
    };
    let free = pool("openrouter-free");
    assert_eq!(free["rpm"], 20);
    assert_eq!(free["rests"][0]["instance"], "openrouter-free", "{free}");
    assert!(
        free["rests"][0]["remaining_ms"]
            .as_u64()
            .is_some_and(|ms| ms > 0)
    );
    let groq = pool("groq-llama-70b");
    assert_eq!(
        (&groq["connection"], &groq["window"]),
        (&json!("each"), &json!("rolling"))
    );
    assert_eq!(groq["rests"], json!([]));
    // The limiter's view: OpenRouter's pool is declared at 20 a minute but the account allowed
    // none, so its one admitted call was a pacing miss that filled the window; Groq's platform
    // instance spent one call.
    assert_eq!(free["use"]["instance"], "openrouter-free", "{free}");
    assert_eq!(free["use"]["misses"], 1, "{free}");
    assert_eq!(free["use"]["window_used"], 20, "{free}");
    assert_eq!(groq["use"]["instance"], "groq-llama-70b@platform", "{groq}");
    assert_eq!(
        (&groq["use"]["window_used"], &groq["use"]["misses"]),
        (&json!(1), &json!(0)),
        "{groq}"
    );
    // What the providers said: OpenRouter's last 429 and its verdict; the requests Groq's answer
    // said were left of its day.
    let refused = &free["seen"]["last_429"];
    assert_eq!(
        (&refused["route"], &refused["verdict"]),
        (
            &json!(format!("platform:openrouter/{FREE}")),
            &json!("account")
        ),
        "{free}"
    );
    assert!(
        groq["seen"]["headroom"]["remaining"]
            .as_i64()
            .is_some_and(|n| n > 0),
        "{groq}"
    );
    assert_eq!(free["seen"]["headroom"], Value::Null, "{free}");
    let metrics = fleet.metrics().await;
    assert!(
        common::fleet::sample(
            &metrics,
            r#"freeway_pool_headroom{pool="groq-llama-70b@platform"}"#
        )
        .is_some_and(|n| n > 0.0),
        "{metrics}"
    );

    let providers = fleet.json("/v1/providers").await;
    let names: Vec<&str> = providers["providers"]
        .as_array()
        .map(|p| p.iter().filter_map(|p| p["name"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(names, ["gemini", "groq", "openrouter", "paid"]);
    assert!(
        !providers.to_string().contains("gsk_fleet"),
        "no key: {providers}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_canary_shows_in_the_providers_the_board_and_the_metrics() {
    let Some(fleet) = Fleet::start_with(
        "canary",
        sim::SimConfig::default(),
        1,
        Logging::default(),
        |sim| {
            let spec =
                json!({"kind": "upstream_429", "model": "openrouter/free", "retry_after_s": 30});
            sim.inject(serde_json::from_value(spec).expect("a fault"));
            let toml = "[pools.openrouter-free]\ncanary_every = \"1s\"\n";
            vec![config_file("canary", toml)]
        },
    )
    .await
    else {
        return;
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let canary = loop {
        let providers = fleet.json("/v1/providers").await;
        let canary = providers["providers"][0]["last_canary"].clone();
        if !canary.is_null() {
            break canary;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no canary: {providers}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(
        canary["route"], "platform:openrouter/openrouter/free",
        "{canary}"
    );
    assert_eq!(
        (&canary["ok"], &canary["http_status"], &canary["verdict"]),
        (&json!(false), &json!(429), &json!("provider")),
        "{canary}"
    );
    assert_eq!(canary["retry_hint_ms"], 30_000, "{canary}");
    let board = fleet.json("/v1/board/overview").await;
    assert_eq!(board["canaries"][0]["provider"], "openrouter", "{board}");
    assert_eq!(board["canaries"][0]["verdict"], "provider", "{board}");
    let failures = r#"freeway_canary_failures_total{provider="openrouter",verdict="provider"}"#;
    let metrics = fleet.metrics_showing(failures, 1.0).await;
    assert_eq!(
        common::fleet::sample(&metrics, failures),
        Some(1.0),
        "{metrics}"
    );
    let rests = fleet.json("/v1/rests").await;
    assert!(
        rests
            .to_string()
            .contains("platform:openrouter/openrouter/free"),
        "the refusal rested the canary's route: {rests}"
    );
    assert!(
        fleet.log_of("worker-0").contains("the canary failed"),
        "{:?}",
        fleet.logs()
    );
}
