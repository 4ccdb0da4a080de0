//! The fleet end to end, as processes: `/metrics` served by the producer counts what
//! the worker replicas did, call for call against the simulator's call log, and a whole run of
//! the fleet at `RUST_LOG=trace` logs no secret, in JSON lines whose spans carry the attempt log.

use crate::common;

use common::JsonBody;
use common::fleet::{
    ADMIN_TOKEN, API_TOKEN, Fleet, Logging, PLATFORM_KEY, SECRET_KEY, config_file, sample,
};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::Duration;

const FREE: &str = "meta-llama/llama-3.3-70b-instruct:free";
const PAID: &str = "openai/gpt-4o-mini";
const SETTLE: Duration = Duration::from_secs(40);

fn run(user: &str, models: &[&str]) -> Value {
    let routes: Vec<Value> = models.iter().map(|m| json!({ "model": m })).collect();
    json!({ "user_id": user, "input": "hello", "routes": routes })
}

/// The outcome label the engine gives a call the simulator answered with `status`, in this
/// scenario (2026-shape quota 429s are the account's; 5xx are the server's).
fn outcome(status: u16) -> &'static str {
    match status {
        200 => "ok",
        429 => "account",
        500 => "server",
        other => panic!("the scenario makes no call answered {other}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_what_the_fleet_did_call_for_call() {
    // Two free calls fit the window; the third earns a 429 whose reset is the next UTC day, so
    // the pool rests the 300 s cap, past the third run's deadline: it is refused, not delayed.
    let config = sim::SimConfig {
        rpm: 2,
        rpd: 1000,
        window_s: 86_400,
        ..sim::SimConfig::default()
    };
    let Some(fleet) = Fleet::start("metrics", config, 2, Logging::default()).await else {
        return;
    };
    let mut server_error = sim::FaultSpec::new(sim::FaultKind::Server500);
    server_error.model = Some(PAID.into());
    let mut ids = Vec::new();
    for (n, body) in [
        run("u1", &[FREE]),
        run("u2", &[FREE]),
        {
            let mut b = run("u3", &[FREE]);
            b["deadline_s"] = json!(30);
            b
        },
        run("u1", &[FREE, PAID]),
        run("u2", &[PAID]),
    ]
    .into_iter()
    .enumerate()
    {
        if n == 4 {
            // The single-route run meets a 500 and gets its one retry (docs/design.md §2.2, rule
            // 5).
            fleet.sim.inject(server_error.clone());
        }
        let id = fleet.enqueue(body).await;
        fleet.settled(&id, SETTLE).await;
        ids.push(id);
    }
    let runs: Vec<Value> = {
        let mut v = Vec::new();
        for id in &ids {
            v.push(fleet.json(&format!("/v1/runs/{id}")).await);
        }
        v
    };
    let statuses: Vec<&str> = runs
        .iter()
        .map(|r| r["status"].as_str().unwrap_or("?"))
        .collect();
    assert_eq!(
        statuses,
        [
            "succeeded",
            "succeeded",
            "refused",
            "succeeded",
            "succeeded"
        ],
        "{runs:#?}"
    );
    assert_eq!(runs[2]["code"], "account_resting");

    let calls = fleet.sim.calls();
    // Each run's delivery is counted after its run settles: wait for both.
    let text = fleet
        .metrics_when(|text| {
            sample(text, "freeway_calls_per_run_count") == Some(5.0)
                && sample(text, "freeway_delivery_seconds_count").is_some_and(|n| n >= 5.0)
        })
        .await;
    // Calls by route and outcome, exactly as the simulator logged them.
    let mut expected: BTreeMap<(String, &str), u64> = BTreeMap::new();
    for c in &calls {
        *expected
            .entry((
                // No configuration names these models: a request's model is no label of its
                // own (it would be a series kept for good), so they all count as `other`.
                "platform:openrouter/other".to_string(),
                outcome(c.status),
            ))
            .or_default() += 1;
    }
    assert_eq!(
        expected.values().sum::<u64>(),
        6,
        "the scenario's calls: {calls:?}"
    );
    for ((route, outcome), n) in &expected {
        let series = format!("freeway_calls_total{{route=\"{route}\",outcome=\"{outcome}\"}}");
        assert_eq!(sample(&text, &series), Some(*n as f64), "{series}\n{text}");
    }
    let counted: f64 = text
        .lines()
        .filter(|l| l.starts_with("freeway_calls_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert_eq!(
        counted,
        calls.len() as f64,
        "no call counted that was not made"
    );

    let quota_429s = calls.iter().filter(|c| c.status == 429).count() as f64;
    for (series, value) in [
        (
            "freeway_rests_written_total{scope=\"pool\",verdict=\"account\"}",
            quota_429s,
        ),
        ("freeway_active_rests{scope=\"pool\"}", 1.0),
        ("freeway_runs{status=\"succeeded\",code=\"\"}", 4.0),
        (
            "freeway_runs{status=\"refused\",code=\"account_resting\"}",
            1.0,
        ),
        ("freeway_delayed_jobs", 0.0),
        ("freeway_workers{state=\"live\"}", 2.0),
        ("freeway_calls_per_run_count", 5.0),
        ("freeway_calls_per_run_sum", calls.len() as f64),
        ("freeway_calls_per_run_bucket{le=\"1\"}", 4.0),
        ("freeway_calls_per_run_bucket{le=\"2\"}", 5.0),
        ("freeway_call_latency_seconds_count", calls.len() as f64),
        (
            "freeway_call_latency_seconds_bucket{le=\"+Inf\"}",
            calls.len() as f64,
        ),
        ("freeway_queue_jobs{state=\"dead\"}", 0.0),
    ] {
        assert_eq!(sample(&text, series), Some(value), "{series}\n{text}");
    }
    // Every run was delivered at least once, and each delivery held its slot for some time.
    let deliveries = sample(&text, "freeway_delivery_seconds_count").unwrap_or(0.0);
    assert!(deliveries >= 5.0, "{text}");
    assert_eq!(
        sample(&text, "freeway_delivery_seconds_bucket{le=\"+Inf\"}"),
        Some(deliveries),
        "{text}"
    );
    assert!(
        sample(&text, "freeway_delivery_seconds_sum").is_some_and(|s| s > 0.0),
        "{text}"
    );
    assert_eq!(
        text.lines()
            .filter(|l| l.starts_with("freeway_rests_written_total{"))
            .count(),
        1,
        "only the pool rest was written: {text}"
    );
    for family in [
        "freeway_runs gauge",
        "freeway_calls_total counter",
        "freeway_rests_written_total counter",
        "freeway_active_rests gauge",
        "freeway_delayed_jobs gauge",
        "freeway_queue_jobs gauge",
        "freeway_calls_per_run histogram",
        "freeway_call_latency_seconds histogram",
        "freeway_delivery_seconds histogram",
    ] {
        assert!(
            text.contains(&format!("# TYPE {family}\n")),
            "{family} missing"
        );
    }
}

const USER_KEY: &str = "sk-or-v1-user-own-key-3a9f0e6b2c";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_whole_run_at_trace_level_logs_no_secret_and_json_spans_carry_the_attempt_log() {
    let Some(mut fleet) = Fleet::start(
        "secrets",
        sim::SimConfig::default(),
        2,
        Logging {
            rust_log: "trace",
            json: true,
        },
    )
    .await
    else {
        return;
    };
    // A user's own key, used by a run on their connection.
    let (status, body) = fleet
        .call(
            "PUT",
            "/v1/connections/conn_secret",
            Some(&json!({ "user_id": "u-sec", "provider": "openrouter", "api_key": USER_KEY })),
        )
        .await;
    assert_eq!(status, 204, "{body}");
    let own = fleet
        .enqueue(json!({
            "user_id": "u-sec", "input": "mine",
            "routes": [{ "model": PAID, "connection": "conn_secret" }]
        }))
        .await;
    // A platform run that fails over: an upstream provider's 429 rests the first route.
    let mut upstream = sim::FaultSpec::new(sim::FaultKind::Upstream429);
    upstream.model = Some(FREE.into());
    upstream.provider_name = Some("Venice".into());
    fleet.sim.inject(upstream);
    let platform = fleet
        .enqueue(run("u-plat", &[FREE, "qwen/qwen3-coder:free"]))
        .await;
    for id in [&own, &platform] {
        let run = fleet.settled(id, SETTLE).await;
        assert_eq!(run["status"], "succeeded", "{run}");
    }
    let keys: Vec<String> = fleet.sim.calls().into_iter().map(|c| c.key).collect();
    assert!(
        keys.contains(&USER_KEY.to_string()),
        "the user's key was used"
    );
    assert!(
        keys.contains(&PLATFORM_KEY.to_string()),
        "the platform key was used"
    );
    // A job in the queue is no proof of ownership: bob's run naming u-sec's connection, pushed
    // past the API, is skipped by the worker without a call, a rest or a circuit.
    let bobs = bobs_job_on(&fleet, "conn_secret").await;
    let run = settled_pushed(&fleet, &bobs).await;
    assert_eq!(
        (&run["status"], &run["code"]),
        (&json!("failed"), &json!("connection_missing")),
        "{run}"
    );
    let calls = fleet.sim.calls();
    assert_eq!(
        calls.iter().filter(|c| c.key == USER_KEY).count(),
        1,
        "only u-sec's own run used u-sec's key: {calls:?}"
    );
    let (_, rests) = fleet.call("GET", "/v1/rests", None).await;
    assert!(
        !rests.to_string().contains("conn_secret"),
        "bob's run rested nothing of u-sec's: {rests}"
    );
    let user_series = "route=\"conn:*/other\"".to_string();
    let metrics = fleet.metrics_when(|m| m.contains(&user_series)).await;
    assert!(
        !metrics.contains("conn_"),
        "a metrics label names a user's connection:\n{metrics}"
    );
    assert!(
        metrics.contains(&user_series),
        "a user's calls count under conn:*:\n{metrics}"
    );
    // The operator's paths log too: a refused token, a refused clear, a clear.
    let resp = fleet
        .http
        .get(fleet.url("/v1/rests"))
        .bearer_auth("not-the-token")
        .send()
        .await
        .expect("GET");
    assert_eq!(resp.status().as_u16(), 401);
    let route = format!("/v1/rests/route/platform:openrouter/{FREE}");
    let clear = |token: &'static str| {
        fleet
            .http
            .delete(fleet.url(&route))
            .bearer_auth(token)
            .send()
    };
    assert_eq!(
        clear(API_TOKEN).await.expect("DELETE").status().as_u16(),
        403
    );
    assert_eq!(
        clear(ADMIN_TOKEN).await.expect("DELETE").status().as_u16(),
        204
    );
    fleet.stop().await;

    let logs = fleet.logs();
    let total: usize = logs.iter().map(|(_, l)| l.len()).sum();
    assert!(total > 10_000, "trace logs were written ({total} bytes)");
    for (name, log) in &logs {
        for secret in [PLATFORM_KEY, USER_KEY, API_TOKEN, ADMIN_TOKEN, SECRET_KEY] {
            assert!(
                !log.contains(secret),
                "{name}'s log holds a secret ({}…)",
                &secret[..8]
            );
            // A key cut, quoted or escaped differently still shows its distinctive tail.
            let tail = &secret[secret.len() - 10..];
            assert!(!log.contains(tail), "{name}'s log holds a secret's tail");
        }
        for line in log.lines().filter(|l| !l.trim().is_empty()) {
            assert!(
                serde_json::from_str::<Value>(line).is_ok(),
                "{name}: FREEWAY_LOG_FORMAT=json gives JSON lines, got {line}"
            );
        }
    }
    assert!(
        logs.iter()
            .any(|(n, l)| n == "producer" && l.contains("operator clear")),
        "the operator's clear is logged"
    );

    // Every attempt is logged once inside its span, with the attempt log's fields, under the run.
    let attempts: Vec<Value> = logs
        .iter()
        .filter(|(n, _)| n.starts_with("worker"))
        .flat_map(|(_, l)| l.lines().filter_map(|line| serde_json::from_str(line).ok()))
        .filter(|v: &Value| {
            v["fields"]["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("attempt "))
        })
        .collect();
    assert_eq!(attempts.len(), 3, "{attempts:#?}");
    let failed = attempts
        .iter()
        .find(|a| a["fields"]["message"] == "attempt failed")
        .expect("the upstream 429 is logged");
    let span = &failed["span"];
    assert_eq!(span["name"], "attempt");
    assert_eq!(span["n"], 1);
    assert_eq!(span["step"], 1);
    assert_eq!(span["route"], format!("platform:openrouter/{FREE}"));
    assert_eq!(span["status"], 429);
    assert_eq!(span["verdict"], "provider");
    assert_eq!(span["provider_name"], "Venice");
    assert!(span["latency_ms"].is_u64(), "{failed}");
    let run_span = failed["spans"]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["name"] == "run"))
        .expect("the attempt is inside its run's span");
    assert_eq!(run_span["run_id"], platform.as_str());
    assert_eq!(run_span["user_id"], "u-plat");
    let ok = attempts
        .iter()
        .filter(|a| a["fields"]["message"] == "attempt succeeded")
        .map(|a| (a["span"]["n"].clone(), a["span"]["status"].clone()))
        .collect::<Vec<_>>();
    assert!(ok.contains(&(json!(2), json!(200))), "{ok:?}");
    assert!(ok.contains(&(json!(1), json!(200))), "{ok:?}");
}

/// Push a run of user `bob` naming `connection` straight into the queue, past the API's checks.
async fn bobs_job_on(fleet: &Fleet, connection: &str) -> String {
    let request: freeway::job::RunRequest = serde_json::from_value(json!({
        "user_id": "bob", "input": "let me in",
        "routes": [{ "model": PAID, "connection": connection }]
    }))
    .expect("a valid request");
    let job = freeway::job::RunJob::new(request, freeway::clock::epoch_ms());
    let conn = freeway::connect::redis(&common::skip::redis_url())
        .await
        .expect("Redis");
    queue::Queue::new(conn, &fleet.ns)
        .push(std::slice::from_ref(&job))
        .await
        .expect("pushed");
    job.run_id
}

/// A pushed run is stored by the worker's first save: until then it is not found.
async fn settled_pushed(fleet: &Fleet, run_id: &str) -> Value {
    let deadline = tokio::time::Instant::now() + SETTLE;
    loop {
        let (status, run) = fleet.call("GET", &format!("/v1/runs/{run_id}"), None).await;
        if status == 200 && run["status"] != "queued" && run["status"] != "running" {
            return run;
        }
        assert!(tokio::time::Instant::now() < deadline, "{run_id}: {run}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A fleet whose sim and free pool both allow `limit` calls a `window_s`-second window
/// (`declared` is what the configuration file says the pool allows).
async fn fleet_of_free_windows(
    name: &str,
    window_s: u64,
    limit: usize,
    declared: usize,
) -> Option<Fleet> {
    let config = sim::SimConfig {
        rpm: limit as u32,
        rpd: 100_000,
        window_s,
        ..sim::SimConfig::default()
    };
    let toml = format!("[pools.openrouter-free]\nrpm = {declared}\nwindow_s = {window_s}\n");
    Fleet::start_with(name, config, 2, Logging::default(), |_| {
        vec![config_file(name, &toml)]
    })
    .await
}

/// docs/design.md §4.4: every wake goes through the limiter. Another client of the key spends
/// the account's window; a run's call into it earns the one 429, which rests the pool until the
/// window's end and marks the limiter's window full. 79 runs queue behind the rest. The
/// operator clears it: the 80 are woken, and the limiter still sends none of them into the
/// window the provider has spent (on OpenRouter a refused call still spends the day), then at
/// most the account's limit a window, which the refusal stated (the pool declares more): two
/// windows' worth. None earns a 429.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clear_of_a_pool_rest_sends_its_runs_through_the_limiter() {
    const LIMIT: usize = 40;
    // Declared higher than the account allows: the refusal's headers correct it.
    const CONFIGURED: usize = 60;
    // Long enough for the whole set-up to happen inside one window on a loaded machine.
    const WINDOW_MS: u64 = 10_000;
    let Some(fleet) = fleet_of_free_windows("clear", WINDOW_MS / 1000, LIMIT, CONFIGURED).await
    else {
        return;
    };
    // Start early in a window, so the whole set-up happens inside it.
    while freeway::clock::epoch_ms() % WINDOW_MS > 1_500 {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let window_end = (freeway::clock::epoch_ms() / WINDOW_MS + 1) * WINDOW_MS;
    let chat = format!("{}/chat/completions", fleet.sim.base_url());
    for _ in 0..LIMIT {
        let body =
            json!({"model": FREE, "messages": [{"role": "user", "content": "other client"}]});
        let r = fleet
            .http
            .post(&chat)
            .bearer_auth(PLATFORM_KEY)
            .json_body(&body)
            .send()
            .await
            .expect("the sim answers");
        assert_eq!(r.status().as_u16(), 200);
    }
    let mut first = run("u0", &[FREE]);
    first["on_rest"] = json!("queue");
    let first = fleet.enqueue(first).await;
    let rested = fleet
        .json_when("/v1/rests", |r| {
            r["rests"]
                .as_array()
                .is_some_and(|a| a.iter().any(|x| x["scope"] == "pool"))
        })
        .await;
    // The refusal's headers taught the pool what the account really allows; `/v1/pools` shows
    // it beside the configured limit, with the miss and the window's end.
    let pools = fleet.json("/v1/pools").await;
    let pool = &pools["pools"][0];
    assert_eq!(pool["name"], "openrouter-free", "{pools}");
    assert_eq!(pool["rpm"], CONFIGURED, "the configured limit: {pool}");
    let used = &pool["use"];
    assert_eq!(
        used["learned"]["per_window"], LIMIT,
        "the stated limit: {pool}"
    );
    assert!(used["learned"]["at_ms"].as_u64().is_some(), "{pool}");
    assert_eq!(used["misses"], 1, "{pool}");
    let resets = used["window_resets_in_ms"]
        .as_u64()
        .expect("the window's end");
    assert!(resets <= WINDOW_MS, "{pool}");
    let mut bodies = Vec::new();
    // With the first, two windows' worth: the second window shows the limit held across the clear.
    for n in 0..(2 * LIMIT - 1) {
        let mut b = run(&format!("u{}", n % 7), &[FREE]);
        b["on_rest"] = json!("queue");
        bodies.push(b);
    }
    let (status, batch) = fleet
        .call("POST", "/v1/runs:batch", Some(&json!({ "runs": bodies })))
        .await;
    assert_eq!(status, 200, "{batch}");
    let mut ids: Vec<String> = batch["results"]
        .as_array()
        .expect("one result a body")
        .iter()
        .map(|r| r["run_id"].as_str().expect("enqueued").to_string())
        .collect();
    ids.push(first);
    fleet
        .json_when("/v1/runs?status=delayed&limit=200", |r| {
            r["runs"].as_array().is_some_and(|a| a.len() == ids.len())
        })
        .await;
    let cleared_at = freeway::clock::epoch_ms();
    assert!(
        cleared_at < window_end,
        "the set-up took past the window: {rested}"
    );
    let cleared = fleet
        .http
        .delete(fleet.url("/v1/rests/pool/openrouter-free"))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .expect("the producer answers");
    assert_eq!(cleared.status().as_u16(), 204);
    for id in &ids {
        let run = fleet.settled(id, Duration::from_secs(90)).await;
        assert_eq!(run["status"], "succeeded", "{run}");
    }
    let after: Vec<sim::CallRecord> = fleet
        .sim
        .calls()
        .into_iter()
        .filter(|c| c.t_ms >= cleared_at)
        .collect();
    assert_eq!(after.len(), ids.len(), "one call a run after the clear");
    assert!(
        after.iter().all(|c| c.status == 200),
        "no woken run earned a 429: {:?}",
        after.iter().filter(|c| c.status != 200).collect::<Vec<_>>()
    );
    assert!(
        after.iter().all(|c| c.t_ms >= window_end),
        "none went into the spent window"
    );
    let mut per_window: BTreeMap<u64, usize> = BTreeMap::new();
    for c in &after {
        *per_window.entry(c.t_ms / WINDOW_MS).or_default() += 1;
    }
    assert!(
        per_window.values().all(|&n| n <= LIMIT),
        "at most the limit a window: {per_window:?}"
    );
}

/// docs/design.md §4.4: an operator's bulk retry is paced like any enqueue. 1,000 failed runs on
/// the free pool, whose account allows 250 calls a window, are retried by one bulk action, one
/// entry in the audit trail: the answer says they wait their turn, and the sim's log shows it:
/// every retried run succeeds with one call, none earns a 429, at most 250 a window, over at
/// least four windows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bulk_retry_calls_no_faster_than_the_pool_allows() {
    const LIMIT: usize = 250;
    const FAILED: usize = 1_000;
    // Short: the test lasts four of them. The windows' number, not their length, is the rule.
    const WINDOW_MS: u64 = 5_000;
    let Some(fleet) = fleet_of_free_windows("bulkpace", WINDOW_MS / 1000, LIMIT, LIMIT).await
    else {
        return;
    };
    fleet.seed_failed_runs(FAILED, FREE).await;
    let bulk = |body: Value| {
        fleet
            .http
            .post(fleet.url("/v1/runs:bulk"))
            .bearer_auth(ADMIN_TOKEN)
            .json_body(&body)
            .send()
    };
    let filter = json!({ "status": "failed" });
    let counted = bulk(json!({ "action": "retry", "filter": filter, "dry_run": true }))
        .await
        .expect("the producer answers");
    let counted = common::json_of(counted).await;
    assert_eq!(counted["matched"], FAILED, "{counted}");
    let retried_at = freeway::clock::epoch_ms();
    let done = bulk(json!({ "action": "retry", "filter": filter, "expect": FAILED }))
        .await
        .expect("the producer answers");
    assert_eq!(done.status().as_u16(), 200);
    let done = common::json_of(done).await;
    assert_eq!(done["done"], FAILED, "{done}");
    assert!(
        done["message"]
            .as_str()
            .is_some_and(|m| m.contains("waits its turn in its pool's limiter")),
        "the answer says what will happen: {done}"
    );
    let audit = fleet
        .http
        .get(fleet.url("/v1/audit"))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .expect("the producer answers");
    let audit = common::json_of(audit).await;
    let entries = audit["entries"].as_array().expect("entries");
    assert_eq!(entries.len(), 1, "one action: {audit}");
    assert_eq!(entries[0]["action"], "bulk_retry", "{audit}");
    // The windows the limit needs, and time for a loaded machine to make the calls.
    let windows = FAILED.div_ceil(LIMIT) as u64 + 2;
    let within = Duration::from_millis(windows * WINDOW_MS) + Duration::from_secs(30);
    fleet
        .json_within("/v1/runs?status=succeeded&limit=1", within, |r| {
            r["counts"]["succeeded"] == FAILED
        })
        .await;
    let calls: Vec<sim::CallRecord> = fleet
        .sim
        .calls()
        .into_iter()
        .filter(|c| c.t_ms >= retried_at)
        .collect();
    assert_eq!(calls.len(), FAILED, "one call a retried run");
    assert!(
        calls.iter().all(|c| c.status == 200),
        "no retried run earned a 429: {:?}",
        calls.iter().filter(|c| c.status != 200).collect::<Vec<_>>()
    );
    let mut per_window: BTreeMap<u64, usize> = BTreeMap::new();
    for c in &calls {
        *per_window.entry(c.t_ms / WINDOW_MS).or_default() += 1;
    }
    assert!(
        per_window.values().all(|&n| n <= LIMIT),
        "at most the limit a window: {per_window:?}"
    );
    assert!(
        per_window.len() >= FAILED.div_ceil(LIMIT),
        "spread over the windows the limit needs: {per_window:?}"
    );
}

/// A producer killed (SIGKILL) in the middle of `POST /v1/runs:batch` strands nothing: sending
/// the batch again with the same idempotency keys pushes every run the first request recorded
/// and did not push, and enqueues the rest; every run succeeds with one provider call. (The
/// recorded, never-pushed runs stayed `queued` for a day, and the resend answered 202 with
/// them.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_producer_killed_mid_batch_strands_no_run_once_the_batch_is_resent() {
    let Some(mut fleet) = Fleet::start(
        "batchkill",
        sim::SimConfig::default(),
        0,
        Logging::default(),
    )
    .await
    else {
        return;
    };
    let runs: Vec<Value> = (0..1000)
        .map(|i| {
            let mut body = run(&format!("u{}", i % 10), &[PAID]);
            body["idempotency_key"] = json!(format!("batch-{i}"));
            body
        })
        .collect();
    let batch = json!({ "runs": runs });
    let store = freeway::store::SqlStore::open(&fleet.db_url)
        .await
        .expect("the store");
    let recorded = || async {
        use freeway::store::Store;
        let counts = store.count_by_status().await.expect("counts");
        counts.iter().map(|c| c.runs).sum::<u64>()
    };
    let request = fleet
        .http
        .post(fleet.url("/v1/runs:batch"))
        .bearer_auth(API_TOKEN)
        .json_body(&batch)
        .send();
    let sent = tokio::spawn(request);
    // Kill it once it has recorded some of the batch, not all.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while recorded().await < 20 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the batch never started"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    fleet.kill9("producer");
    let _ = sent.await;
    let at_kill = recorded().await;
    eprintln!("batch kill probe: {at_kill} of 1000 runs recorded when the producer was killed");
    fleet.restart_producer("producer-again").await;
    let (status, resent) = fleet.call("POST", "/v1/runs:batch", Some(&batch)).await;
    assert_eq!(status, 200, "{resent}");
    let ids: Vec<String> = resent["results"]
        .as_array()
        .expect("results")
        .iter()
        .map(|r| {
            assert_eq!(r["status"], 202, "{r}");
            r["run_id"].as_str().expect("a run id").to_string()
        })
        .collect();
    assert_eq!(recorded().await, 1000, "one run per idempotency key");
    fleet.add_worker();
    fleet.add_worker();
    let started = std::time::Instant::now();
    for id in &ids {
        let settled = fleet.settled(id, Duration::from_secs(60)).await;
        assert_eq!(settled["status"], "succeeded", "{settled}");
    }
    eprintln!(
        "batch kill probe: 1000 runs succeeded {:?} after the resend",
        started.elapsed()
    );
    let calls = fleet.sim.calls().len();
    assert_eq!(calls, 1000, "one provider call per run");
    fleet.stop().await;
}

/// Requests that carry one idempotency key, sent all at once, answer one run: the same `run_id` in
/// every 202, one stored run and one provider call a key, with `n` = 10 requests on one producer
/// and 50 spread over two; the same for the bodies of `n` identical batches, and for ten retries of
/// one failed run across both producers (one new run). No request answers 503. (On the code before
/// the store decided, 10 requests made 2–4 runs, five batches 101 runs for 50 keys, ten retries 2–4
/// runs and some 503s.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_key_is_one_run_and_one_call_however_many_requests_race() {
    let Some(mut fleet) =
        Fleet::start("onekey", sim::SimConfig::default(), 1, Logging::default()).await
    else {
        return;
    };
    let second = fleet.add_producer("producer-b").await;
    let producers = [fleet.base.clone(), second];
    // `n` requests at once, the i-th to producer `spread(i)`: (status, body) of each.
    let race = async |n: usize, path: &str, body: &Value, spread: fn(usize) -> usize| {
        let requests = (0..n).map(|i| {
            let url = format!("{}{path}", producers[spread(i)]);
            let request = fleet.http.post(url).bearer_auth(API_TOKEN).json_body(body);
            async move {
                let resp = request.send().await.expect("a producer answers");
                let status = resp.status().as_u16();
                (status, common::json_of(resp).await)
            }
        });
        futures_util::future::join_all(requests).await
    };
    let one_run = |answers: &[(u16, Value)]| -> String {
        let first = answers[0].1["run_id"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        for (status, body) in answers {
            assert_eq!(*status, 202, "{body}");
            assert_eq!(body["run_id"], first.as_str(), "{answers:?}");
        }
        first
    };
    let mut runs = Vec::new();
    for (n, spread) in [(10, (|_| 0) as fn(usize) -> usize), (50, |i| i % 2)] {
        let mut body = run("racer", &[PAID]);
        body["idempotency_key"] = json!(format!("double-click-{n}"));
        runs.push(one_run(&race(n, "/v1/runs", &body, spread).await));
        // `n` identical batches of ten keyed bodies at once.
        let bodies: Vec<Value> = (0..10)
            .map(|i| {
                let mut body = run(&format!("b{i}"), &[PAID]);
                body["idempotency_key"] = json!(format!("batch-{n}-{i}"));
                body
            })
            .collect();
        let batches = race(n, "/v1/runs:batch", &json!({ "runs": bodies }), spread).await;
        for i in 0..bodies.len() {
            let answers: Vec<(u16, Value)> = batches
                .iter()
                .map(|(status, body)| {
                    assert_eq!(*status, 200, "{body}");
                    let result = &body["results"][i];
                    let status = result["status"].as_u64().unwrap_or(0) as u16;
                    (status, result.clone())
                })
                .collect();
            runs.push(one_run(&answers));
        }
    }
    let failed = fleet.seed_failed_runs(1, PAID).await.remove(0);
    let retry = format!("/v1/runs/{failed}/retry?user_id=seed0");
    let retries = race(10, &retry, &json!({}), |i| i % 2).await;
    runs.push(one_run(&retries));

    for id in &runs {
        let settled = fleet.settled(id, SETTLE).await;
        assert_eq!(settled["status"], "succeeded", "{settled}");
    }
    let store = freeway::store::SqlStore::open(&fleet.db_url)
        .await
        .expect("the store");
    let stored = {
        use freeway::store::Store;
        let counts = store.count_by_status().await.expect("counts");
        counts.iter().map(|c| c.runs).sum::<u64>()
    };
    assert_eq!(
        stored as usize,
        runs.len() + 1,
        "one run a key, and the seeded one"
    );
    {
        use freeway::store::Store;
        assert_eq!(
            store.retried_as(&failed).await.expect("retries"),
            [runs[runs.len() - 1].clone()]
        );
    }
    assert_eq!(
        fleet.sim.calls().len(),
        runs.len(),
        "one provider call a key"
    );
    fleet.stop().await;
}

/// A worker whose store writer fails ("database or disk is full", its own disk) makes the fleet
/// unhealthy, though the producer's own writer is fine: `/healthz` is 503 naming the replica,
/// and 200 again once it writes. (It said 200 `store: ok`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthz_reports_a_worker_whose_store_writer_fails() {
    let Some(fleet) = Fleet::start(
        "writerhealth",
        sim::SimConfig::default(),
        1,
        Logging::default(),
    )
    .await
    else {
        return;
    };
    let worker = fleet.pid("worker-0");
    let replica_suffix = format!("-{worker}");
    fleet.json_when("/healthz", |h| h["store"] == "ok").await;
    // Its file size limited to nothing: SQLite's next write in that process fails (SQLITE_FULL).
    fleet.limit_file_size("worker-0", "1:unlimited");
    let unhealthy = fleet
        .json_when("/healthz", |h| h["store"] == "failed")
        .await;
    let writers = unhealthy["writers"]
        .as_object()
        .expect("the failing writers");
    assert!(
        writers.keys().any(|r| r.ends_with(&replica_suffix)),
        "the replica is named: {unhealthy}"
    );
    assert!(!writers.contains_key("producer"), "{unhealthy}");
    let resp = fleet
        .http
        .get(fleet.url("/healthz"))
        .send()
        .await
        .expect("GET");
    assert_eq!(resp.status().as_u16(), 503);
    fleet.limit_file_size("worker-0", "unlimited:unlimited");
    let healthy = fleet.json_when("/healthz", |h| h["store"] == "ok").await;
    assert_eq!(healthy["writers"], Value::Null, "{healthy}");
}

/// The Python with opentelemetry-proto the OTLP receiver needs (`OTLP_PYTHON`, which
/// scripts/test.sh sets); `None`, said, on a machine without it.
fn otlp_python() -> Option<String> {
    let python = std::env::var("OTLP_PYTHON").ok().filter(|p| !p.is_empty());
    if python.is_none() {
        common::skip::skipped("an OTLP receiver", "OTLP_PYTHON is not set");
    }
    python
}

/// The spans the receiver has written, once `holds` is true of them (each process exports in
/// batches, every 200 ms here).
async fn spans_when(out: &std::path::Path, holds: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let spans: Vec<Value> = std::fs::read_to_string(out)
            .unwrap_or_default()
            .lines()
            .filter_map(|line| serde_json::from_str(line).ok())
            .collect();
        if holds(&spans) {
            return spans;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the spans never arrived: {spans:#?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runs_spans_arrive_under_the_trace_of_the_request_that_enqueued_it() {
    let Some(python) = otlp_python() else {
        return;
    };
    let port = common::fleet::free_port();
    let out = std::env::temp_dir().join(format!("spans-{}.jsonl", ulid::Ulid::generate()));
    let mut receiver = tokio::process::Command::new(python)
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../tests/otlp/receiver.py"
        ))
        .arg(port.to_string())
        .arg(&out)
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("the receiver starts");
    let mut said = String::new();
    let stdout = receiver.stdout.as_mut().expect("the receiver's stdout");
    tokio::io::AsyncBufReadExt::read_line(&mut tokio::io::BufReader::new(stdout), &mut said)
        .await
        .expect("the receiver says it listens");
    assert_eq!(said.trim(), "listening");
    let endpoint = format!("http://127.0.0.1:{port}");
    let Some(mut fleet) = Fleet::start_with(
        "traces",
        sim::SimConfig::default(),
        1,
        Logging::default(),
        |_| {
            vec![
                ("OTEL_EXPORTER_OTLP_ENDPOINT".into(), endpoint),
                ("OTEL_BSP_SCHEDULE_DELAY".into(), "200".into()),
            ]
        },
    )
    .await
    else {
        return;
    };
    // The web request's own span, as its framework would send it on.
    let trace_id = format!("{:032x}", fresh_trace_id());
    let request_span = "00f067aa0ba902b7";
    let traceparent = format!("00-{trace_id}-{request_span}-01");
    let resp = fleet
        .http
        .post(fleet.url("/v1/runs"))
        .bearer_auth(API_TOKEN)
        .header("traceparent", &traceparent)
        .json_body(&run("u-trace", &[FREE]))
        .send()
        .await
        .expect("the producer answers");
    assert_eq!(resp.status(), 202);
    let run_id = common::json_of(resp).await["run_id"]
        .as_str()
        .expect("a run id")
        .to_string();
    let settled = fleet.settled(&run_id, SETTLE).await;
    assert_eq!(settled["status"], "succeeded", "{settled}");

    let names = [
        "enqueue",
        "run",
        "queue_wait",
        "preflight",
        "attempt",
        "store_write",
    ];
    let spans = spans_when(&out, |spans| {
        names.iter().all(|name| {
            spans
                .iter()
                .any(|s| s["trace_id"] == trace_id.as_str() && s["name"] == *name)
        })
    })
    .await;
    let ours: Vec<&Value> = spans
        .iter()
        .filter(|s| s["trace_id"] == trace_id.as_str())
        .collect();
    let one = |name: &str| -> &Value {
        let found: Vec<&&Value> = ours.iter().filter(|s| s["name"] == name).collect();
        assert_eq!(found.len(), 1, "one {name} span: {ours:#?}");
        found[0]
    };
    let enqueue = one("enqueue");
    assert_eq!(
        enqueue["parent_span_id"], request_span,
        "the web request parents the enqueue"
    );
    assert_eq!(enqueue["service"], "freeway-producer");
    let run = one("run");
    assert_eq!(
        run["parent_span_id"], enqueue["span_id"],
        "the enqueue parents the run"
    );
    assert_eq!(run["service"], "freeway-worker");
    assert_eq!(run["attributes"]["run_id"], run_id.as_str());
    for child in ["queue_wait", "preflight", "attempt"] {
        assert_eq!(
            one(child)["parent_span_id"],
            run["span_id"],
            "the run parents {child}"
        );
    }
    let attempt = one("attempt");
    assert_eq!(
        attempt["attributes"]["route"],
        format!("platform:openrouter/{FREE}")
    );
    // The status as the attempt log records it (the exporter may carry it as text).
    let status = &attempt["attributes"]["status"];
    assert_eq!(
        status
            .as_str()
            .map_or_else(|| status.to_string(), str::to_string),
        "200"
    );
    let in_run: Vec<&Value> = [run, attempt].iter().map(|s| &s["span_id"]).collect();
    assert!(
        ours.iter()
            .filter(|s| s["name"] == "store_write")
            .all(|s| in_run.contains(&&s["parent_span_id"])),
        "store writes are the run's or its attempt's: {ours:#?}"
    );
    // The provider's request carries the attempt's context.
    let span_id = attempt["span_id"].as_str().expect("a span id");
    let calls = fleet.sim.calls();
    let call = calls
        .iter()
        .find(|c| c.model == FREE)
        .expect("the run called the simulator");
    assert_eq!(
        call.traceparent.as_deref(),
        Some(format!("00-{trace_id}-{span_id}-01").as_str())
    );
    fleet.stop().await;
    let _ = receiver.kill().await;
    let _ = std::fs::remove_file(&out);
}

/// A trace id no other test shares (a ULID; never all zeros).
fn fresh_trace_id() -> u128 {
    let id = ulid::Ulid::generate();
    u128::from(id) | 1
}
