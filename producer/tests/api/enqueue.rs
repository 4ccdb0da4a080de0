//! Enqueueing a run (`POST /v1/runs`): accepted, recorded and queued; refused with the field
//! named; refused while its routes rest; one run per idempotency key.

use crate::common::{JsonBody, Server, json_of, run_body};
use crate::{code, rest_pool, rests};
use freeway::classify::{RestLength, RestScope};
use freeway::rest::Rests;
use serde_json::{Value, json};

#[tokio::test]
async fn a_run_is_accepted_recorded_and_queued() {
    let Some(s) = Server::open().await else {
        return;
    };
    let (status, body) = s.post_run(&run_body("u1", "vendor/m:free")).await;
    assert_eq!(status, 202, "{body}");
    assert_eq!(body["status"], "queued");
    let run_id = body["run_id"].as_str().expect("a run id");
    assert!(run_id.starts_with("run_"));

    let (status, run) = s.get_json(&format!("/v1/runs/{run_id}")).await;
    assert_eq!(status, 200, "{run}");
    assert_eq!(run["run_id"], run_id);
    assert_eq!(run["status"], "queued");
    assert_eq!(run["kind"], "chat");
    assert_eq!(run["calls"], 0);
    assert_eq!(run["attempts"], json!([]));
    assert_eq!(run["pending_approval"], Value::Null);
    assert_eq!(run["routes"], json!([{ "model": "vendor/m:free" }]));
    assert!(run["deadline_ms"].as_u64() > run["created_ms"].as_u64());

    let depths = s.enqueuer.queue().depths().await.expect("depths");
    assert_eq!(depths.waiting, 1, "{depths:?}");
    let job = s
        .enqueuer
        .job(run_id)
        .await
        .expect("job read")
        .expect("kept");
    assert_eq!(job.request.input.as_deref(), Some("hello"));
}

#[tokio::test]
async fn invalid_requests_are_400_naming_the_field() {
    let Some(s) = Server::open().await else {
        return;
    };
    let cases = [
        (
            json!({ "user_id": "u1", "routes": [{ "model": "m" }] }),
            "input",
        ),
        (
            json!({ "user_id": "bad user", "input": "x", "routes": [{ "model": "m" }] }),
            "user_id",
        ),
        (
            json!({ "user_id": "u1", "input": "x", "routes": [] }),
            "routes",
        ),
        (
            json!({ "user_id": "u1", "input": "x", "routes": [{ "model": "m" }], "deadline_s": 0 }),
            "deadline_s",
        ),
    ];
    for (body, field) in cases {
        let (status, err) = s.post_run(&body).await;
        assert_eq!(status, 400, "{err}");
        assert_eq!(code(&err), "invalid_request");
        let message = err["error"]["message"].as_str().expect("a message");
        assert!(message.starts_with(&format!("{field}:")), "{message}");
    }
    let resp = s
        .http
        .post(s.url("/v1/runs"))
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .expect("POST");
    assert_eq!(resp.status().as_u16(), 400);
    let err: Value = json_of(resp).await;
    assert_eq!(code(&err), "invalid_request");
    assert!(
        err["error"]["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("body:")),
        "{err}"
    );
    assert_eq!(s.stored_runs().await, 0);
}

/// Tool parameters nested deeper than a worker could read back once they are a job are refused
/// at enqueue, at every depth between the limit and what the body parser takes; nothing is
/// written. (They were accepted, then dead-lettered, and the run stayed `queued`.)
#[tokio::test]
async fn tool_parameters_too_deep_for_a_job_are_400_and_write_nothing() {
    let Some(s) = Server::open().await else {
        return;
    };
    for levels in [33, 64, 118, 121, 123, 124] {
        let mut schema = json!(1);
        for _ in 0..levels {
            schema = json!({ "p": schema });
        }
        let mut body = run_body("u1", "vendor/m:free");
        body["tools"] =
            json!([{ "name": "t", "parameters": { "type": "object", "properties": schema } }]);
        let (status, err) = s.post_run(&body).await;
        assert_eq!(status, 400, "{levels} levels: {err}");
        let message = err["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.starts_with("tools[0].parameters:") || message.starts_with("body:"),
            "{levels} levels: {message}"
        );
    }
    assert_eq!(s.stored_runs().await, 0);
}

/// The built-in catalog with a `pro` tier.
fn tiered() -> freeway::catalog::Catalog {
    freeway::catalog::Catalog::from_toml("[tiers.pro]\nweight = 4\n").expect("a valid file")
}

#[tokio::test]
async fn bad_tenants_tiers_and_caps_are_400_naming_the_field() {
    let Some(s) = Server::with_catalog(tiered()).await else {
        return;
    };
    let with = |extra: Value| {
        let mut body = run_body("u1", "vendor/m");
        for (k, v) in extra.as_object().expect("an object") {
            body[k] = v.clone();
        }
        body
    };
    let cases = [
        (
            json!({ "tier": "gold" }),
            "tier: unknown tier \"gold\"; configured: default, pro",
        ),
        (json!({ "tenant": "acme corp" }), "tenant: must match"),
        (json!({ "tenant": "" }), "tenant: must match"),
        (json!({ "max_usd": 0 }), "max_usd: must be a number above 0"),
        (
            json!({ "max_usd": -0.5 }),
            "max_usd: must be a number above 0",
        ),
        (
            json!({ "max_usd": "0.5" }),
            "body: invalid type: string \"0.5\"",
        ),
        (
            json!({ "priority": "urgent" }),
            "body: unknown variant `urgent`",
        ),
    ];
    for (extra, want) in cases {
        let (status, err) = s.post_run(&with(extra.clone())).await;
        assert_eq!(status, 400, "{extra}: {err}");
        assert_eq!(code(&err), "invalid_request");
        let message = err["error"]["message"].as_str().expect("a message");
        assert!(message.starts_with(want), "{extra}: {message}");
    }
    assert_eq!(s.stored_runs().await, 0);
    let (status, body) = s
        .post_run(&with(json!({ "tier": "pro", "max_usd": 1.5 })))
        .await;
    assert_eq!(status, 202, "{body}");
}

#[tokio::test]
async fn tenant_tier_priority_and_cap_round_trip_through_the_store() {
    let Some(s) = Server::with_catalog(tiered()).await else {
        return;
    };
    let mut body = run_body("u1", "vendor/m");
    body["tenant"] = json!("org_acme");
    body["tier"] = json!("pro");
    body["priority"] = json!("batch");
    body["max_usd"] = json!(0.75);
    let (status, posted) = s.post_run(&body).await;
    assert_eq!(status, 202, "{posted}");
    let run_id = posted["run_id"].as_str().expect("a run id").to_string();
    let (_, plain) = s.post_run(&run_body("u2", "vendor/m")).await;
    let plain_id = plain["run_id"].as_str().expect("a run id").to_string();

    let (status, run) = s.get_json(&format!("/v1/runs/{run_id}")).await;
    assert_eq!(status, 200, "{run}");
    assert_eq!(
        [
            &run["tenant"],
            &run["tier"],
            &run["priority"],
            &run["max_usd"],
            &run["cost_usd"]
        ],
        [
            &json!("org_acme"),
            &json!("pro"),
            &json!("batch"),
            &json!(0.75),
            &json!(0.0)
        ]
    );
    // A run that named none is its user's, in the default tier, interactive, uncapped.
    let (_, run) = s.get_json(&format!("/v1/runs/{plain_id}")).await;
    assert_eq!(
        [
            &run["tenant"],
            &run["tier"],
            &run["priority"],
            &run["max_usd"],
            &run["cost_usd"]
        ],
        [
            &json!("u2"),
            &json!("default"),
            &json!("interactive"),
            &Value::Null,
            &json!(0.0)
        ]
    );

    let (status, list) = s.get_json("/v1/runs?tenant=org_acme").await;
    assert_eq!(status, 200, "{list}");
    let runs = list["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), 1, "{list}");
    assert_eq!(runs[0]["run_id"], run_id.as_str());
    assert_eq!(
        [
            &runs[0]["tenant"],
            &runs[0]["tier"],
            &runs[0]["priority"],
            &runs[0]["max_usd"]
        ],
        [
            &json!("org_acme"),
            &json!("pro"),
            &json!("batch"),
            &json!(0.75)
        ]
    );
    assert_eq!(list["counts"]["queued"], 1);
    let (_, list) = s.get_json("/v1/runs?tenant=u2").await;
    assert_eq!(list["runs"][0]["run_id"], plain_id.as_str(), "{list}");
    assert_eq!(list["runs"].as_array().map(Vec::len), Some(1));
    let (status, err) = s.get_json("/v1/runs?tenant=a%20b").await;
    assert_eq!(status, 400, "{err}");

    // The job a retry or the reconciler reads back carries them too.
    let job = s.enqueuer.job(&run_id).await.expect("read").expect("kept");
    assert_eq!(
        (
            job.request.tenant_id(),
            job.request.tier_name(),
            job.request.max_usd
        ),
        ("org_acme", "pro", Some(0.75))
    );
}

#[tokio::test]
async fn a_resting_pool_refuses_with_retry_after_and_writes_nothing() {
    let Some(s) = Server::open().await else {
        return;
    };
    rest_pool(&s, 30_000).await;
    let resp = s
        .http
        .post(s.url("/v1/runs"))
        .json_body(&run_body("u1", "vendor/m:free"))
        .send()
        .await
        .expect("POST");
    assert_eq!(resp.status().as_u16(), 429);
    let retry_after: u64 = resp
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .expect("a Retry-After in seconds");
    assert!((1..=30).contains(&retry_after), "{retry_after}");
    let err: Value = json_of(resp).await;
    assert_eq!(code(&err), "account_resting");
    assert_eq!(err["error"]["retry_after_s"], retry_after);

    assert_eq!(
        s.enqueuer.queue().depths().await.expect("depths"),
        Default::default()
    );
    assert_eq!(s.stored_runs().await, 0);
    assert!(s.keys("run:*").await.is_empty());
    assert!(s.keys("job:*").await.is_empty());

    // The same while queueing is allowed: accepted, for the worker to delay.
    let mut body = run_body("u1", "vendor/m:free");
    body["on_rest"] = json!("queue");
    let (status, body) = s.post_run(&body).await;
    assert_eq!(status, 202, "{body}");
    assert_eq!(
        s.enqueuer.queue().depths().await.expect("depths").waiting,
        1
    );
    assert_eq!(s.stored_runs().await, 1);

    // A batch run that says nothing of on_rest waits too; one that says refuse is refused.
    let mut batch = run_body("u1", "vendor/m:free");
    batch["priority"] = json!("batch");
    let (status, body) = s.post_run(&batch).await;
    assert_eq!(status, 202, "{body}");
    let run_id = body["run_id"].as_str().expect("a run id");
    let job = s.enqueuer.job(run_id).await.expect("read").expect("kept");
    assert_eq!(job.request.on_rest, None, "the job keeps it unsaid");
    batch["on_rest"] = json!("refuse");
    let (status, err) = s.post_run(&batch).await;
    assert_eq!(status, 429, "{err}");
    assert_eq!(code(&err), "account_resting");
    assert_eq!(s.stored_runs().await, 2);
}

#[tokio::test]
async fn a_chain_with_a_resting_off_quota_route_is_routes_resting() {
    let Some(s) = Server::open().await else {
        return;
    };
    rest_pool(&s, 30_000).await;
    rests(&s)
        .write(
            &RestScope::Route {
                pool: None,
                route_key: "platform:openrouter/vendor/paid".into(),
            },
            RestLength::For(5_000),
            "test rest",
        )
        .await
        .expect("rest written");
    let body = json!({ "user_id": "u1", "input": "hi",
        "routes": [{ "model": "vendor/m:free" }, { "model": "vendor/paid" }] });
    let (status, err) = s.post_run(&body).await;
    assert_eq!(status, 429, "{err}");
    assert_eq!(code(&err), "routes_resting");
    let retry_after_s = err["error"]["retry_after_s"]
        .as_u64()
        .expect("retry_after_s");
    assert!(retry_after_s <= 5, "{err}");
    // An open off-quota route keeps the run going while the pool rests.
    let body = json!({ "user_id": "u1", "input": "hi",
        "routes": [{ "model": "vendor/m:free" }, { "model": "vendor/other" }] });
    let (status, _) = s.post_run(&body).await;
    assert_eq!(status, 202);
}

/// docs/design.md §4.8: a chain left with only priced routes past a spend cap is refused at
/// enqueue (`spend_cap_reached`, nothing written); a run that may queue waits for its free route.
#[tokio::test]
async fn only_capped_priced_routes_left_is_spend_cap_reached_at_enqueue() {
    // A call on vendor/paid is held at more than the tier's whole day.
    let Some(s) = Server::with_catalog(
        freeway::catalog::Catalog::from_toml(
            "[tiers.default]\nspend_usd_per_day = 0.000001\n\
             [prices]\n\"vendor/paid\" = { input = 1000.0, output = 1000.0 }\n",
        )
        .expect("a valid file"),
    )
    .await
    else {
        return;
    };
    let body = json!({ "user_id": "u1", "tenant": "acme", "input": "hi",
        "routes": [{ "model": "vendor/paid" }] });
    let (status, err) = s.post_run(&body).await;
    assert_eq!(status, 429, "{err}");
    assert_eq!(code(&err), "spend_cap_reached");
    assert_eq!(s.stored_runs().await, 0);
    // With a free route after it and leave to wait, the run is taken.
    rest_pool(&s, 30_000).await;
    let body = json!({ "user_id": "u1", "tenant": "acme", "input": "hi", "on_rest": "queue",
        "routes": [{ "model": "vendor/paid" }, { "model": "vendor/m:free" }] });
    let (status, _) = s.post_run(&body).await;
    assert_eq!(status, 202);
}

#[tokio::test]
async fn an_idempotency_key_gives_the_same_run_once() {
    let Some(s) = Server::open().await else {
        return;
    };
    let mut body = run_body("u1", "vendor/m");
    body["idempotency_key"] = json!("req-42");
    let (s1, first) = s.post_run(&body).await;
    let (s2, second) = s.post_run(&body).await;
    assert_eq!((s1, s2), (202, 202));
    assert_eq!(first["run_id"], second["run_id"]);
    assert_eq!(
        s.enqueuer.queue().depths().await.expect("depths").waiting,
        1
    );
    assert_eq!(s.stored_runs().await, 1);
    // Another user's identical key is another run.
    body["user_id"] = json!("u2");
    let (_, third) = s.post_run(&body).await;
    assert_ne!(third["run_id"], first["run_id"]);
    assert_eq!(
        s.enqueuer.queue().depths().await.expect("depths").waiting,
        2
    );
}

#[tokio::test]
async fn a_batch_answers_each_body_in_order_and_a_bad_one_changes_nothing_of_the_others() {
    let Some(s) = Server::open().await else {
        return;
    };
    let post = |body: Value| {
        let req = s.http.post(s.url("/v1/runs:batch")).json_body(&body);
        async move {
            let resp = req.send().await.expect("POST");
            let status = resp.status().as_u16();
            (status, json_of(resp).await)
        }
    };
    let no_user = json!({ "input": "hi", "routes": [{ "model": "vendor/m" }] });
    let runs = json!({ "runs": [run_body("u1", "vendor/m"), no_user, run_body("u2", "vendor/m")] });
    let (status, body) = post(runs).await;
    assert_eq!(status, 200, "{body}");
    let results = body["results"].as_array().expect("results");
    let statuses: Vec<u64> = results
        .iter()
        .filter_map(|r| r["status"].as_u64())
        .collect();
    assert_eq!(statuses, [202, 400, 202], "{body}");
    assert_eq!(results[1]["error"]["code"], "invalid_request");
    assert!(
        results[1]["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("user_id"))
    );
    assert_eq!(s.stored_runs().await, 2, "the bad body wrote nothing");
    for id in [&results[0]["run_id"], &results[2]["run_id"]] {
        let (status, _) = s
            .get_json(&format!("/v1/runs/{}", id.as_str().unwrap()))
            .await;
        assert_eq!(status, 200);
    }
    // A thousand bodies in one request, past the single-run body limit.
    let many: Vec<Value> = (0..1_000)
        .map(|n| {
            let mut body = run_body(&format!("u{n}"), "vendor/m");
            body["input"] = json!("x".repeat(300));
            body
        })
        .collect();
    let (status, body) = post(json!({ "runs": many })).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["results"].as_array().map(Vec::len), Some(1_000));
    assert_eq!(s.stored_runs().await, 1_002);
    for bad in [
        json!({ "runs": [] }),
        json!([run_body("u1", "vendor/m")]),
        json!({ "runs": (0..1_001).map(|_| json!({})).collect::<Vec<_>>() }),
    ] {
        let (status, err) = post(bad).await;
        assert_eq!((status, code(&err)), (400, "invalid_request"), "{err}");
    }
}
