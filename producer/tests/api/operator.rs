//! The operator's console actions (docs/api.md): pausing and resuming a pool instance or a route,
//! bulk retry and cancel by filter with a confirmed count, and the audit trail that keeps each.

use crate::common::{Server, run_body};
use crate::{code, tokens};
use freeway::rest::Rests;
use freeway::run::{Code, RunStatus};
use freeway::store::Store;
use serde_json::{Value, json};

const ADMIN: &str = "admin-token-1";
const API: &str = "api-token-1";

/// `method path` with `token` and a JSON body: the status and the body (`null` when empty).
async fn call(s: &Server, method: &str, path: &str, token: &str, body: Value) -> (u16, Value) {
    let req = match method {
        "POST" => s.http.post(s.url(path)),
        "DELETE" => s.http.delete(s.url(path)),
        _ => s.http.get(s.url(path)),
    };
    let req = req.bearer_auth(token);
    let req = match body {
        Value::Null => req,
        body => req
            .header("content-type", "application/json")
            .body(body.to_string()),
    };
    let resp = req.send().await.expect("sent");
    let status = resp.status().as_u16();
    let text = resp.text().await.expect("body");
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// The newest audit entries, as the API lists them.
async fn audit(s: &Server) -> Vec<Value> {
    let (status, body) = call(s, "GET", "/v1/audit?limit=50", ADMIN, Value::Null).await;
    assert_eq!(status, 200, "{body}");
    body["entries"].as_array().cloned().unwrap_or_default()
}

/// `n` runs stored failed with `routes_exhausted`, as a bad hour leaves them.
async fn failed_runs(s: &Server, n: usize) -> Vec<String> {
    let mut ids = Vec::new();
    for i in 0..n {
        let body = run_body(&format!("u{}", i % 3), "vendor/m");
        let (status, body) = call(s, "POST", "/v1/runs", API, body).await;
        assert_eq!(status, 202, "{body}");
        let id = body["run_id"].as_str().expect("run id").to_string();
        let mut rec = s.store.run(&id).await.unwrap().unwrap();
        rec.status = RunStatus::Failed;
        rec.code = Some(Code::RoutesExhausted);
        s.store.save_run(&rec).await.unwrap();
        ids.push(id);
    }
    ids
}

#[tokio::test]
async fn a_pause_rests_a_configured_pool_or_route_with_the_reason_and_a_resume_ends_it() {
    let Some(s) = Server::start(tokens(), None).await else {
        return;
    };
    let pause = json!({ "reason": "provider incident #42", "for_s": 600 });
    // Only the admin token; only what the configuration places; a reason of text.
    let (status, _) = call(
        &s,
        "POST",
        "/v1/rests/pool/openrouter-free",
        API,
        pause.clone(),
    )
    .await;
    assert_eq!(status, 403);
    for (path, body, want) in [
        ("/v1/rests/pool/no-such-pool", pause.clone(), 404),
        ("/v1/rests/route/platform:nobody/m", pause.clone(), 404),
        ("/v1/rests/route/conn:conn_missing/m", pause.clone(), 404),
        (
            "/v1/rests/connection/platform:openrouter",
            pause.clone(),
            400,
        ),
        (
            "/v1/rests/pool/openrouter-free",
            json!({ "reason": "" }),
            400,
        ),
        (
            "/v1/rests/pool/openrouter-free",
            json!({ "reason": "a\u{7}b" }),
            400,
        ),
        (
            "/v1/rests/pool/openrouter-free",
            json!({ "reason": "x", "for_s": 10 }),
            400,
        ),
        (
            "/v1/rests/pool/openrouter-free",
            json!({ "reason": "x", "for_s": 90_001 }),
            400,
        ),
    ] {
        let (status, err) = call(&s, "POST", path, ADMIN, body).await;
        assert_eq!(status, want, "{path}: {err}");
    }
    assert!(
        s.enqueuer.rests().list().await.unwrap().is_empty(),
        "nothing was rested by a refusal"
    );

    let (status, paused) = call(&s, "POST", "/v1/rests/pool/openrouter-free", ADMIN, pause).await;
    assert_eq!(status, 200, "{paused}");
    let remaining = paused["remaining_ms"].as_u64().expect("remaining_ms");
    assert!((590_000..=600_000).contains(&remaining), "{paused}");
    let route = "platform:openrouter/vendor/paid-model";
    let (status, body) = call(
        &s,
        "POST",
        &format!("/v1/rests/route/{route}"),
        ADMIN,
        json!({ "reason": "bad answers" }),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let rests = s.enqueuer.rests().list().await.unwrap();
    let pool = rests
        .iter()
        .find(|r| r.scope == "pool")
        .expect("the pool rests");
    assert_eq!(pool.reason, "paused by the operator: provider incident #42");
    let routed = rests
        .iter()
        .find(|r| r.scope == "route")
        .expect("the route rests");
    assert_eq!(routed.key, route);
    assert!(
        routed.remaining_ms > 24 * 3_600_000,
        "by default as long as a rest may be"
    );

    // A run on the paused route is refused (on_rest refuse) with the pause's time.
    let mut body = run_body("u1", "vendor/paid-model");
    body["on_rest"] = "refuse".into();
    let (status, refused) = call(&s, "POST", "/v1/runs", API, body).await;
    assert_eq!(
        (status, code(&refused)),
        (429, "routes_resting"),
        "{refused}"
    );

    let (status, _) = call(
        &s,
        "DELETE",
        "/v1/rests/pool/openrouter-free",
        ADMIN,
        Value::Null,
    )
    .await;
    assert_eq!(status, 204, "a resume is the clear");
    let entries = audit(&s).await;
    let actions: Vec<(&str, &str)> = entries
        .iter()
        .map(|e| (e["action"].as_str().unwrap(), e["target"].as_str().unwrap()))
        .collect();
    assert_eq!(
        actions,
        [
            ("clear", "pool/openrouter-free"),
            ("pause", &*format!("route/{route}")),
            ("pause", "pool/openrouter-free"),
        ]
    );
    assert!(entries.iter().all(|e| e["actor"] == "admin token"));
    assert!(
        entries[2]["detail"]
            .as_str()
            .unwrap()
            .contains("provider incident #42")
    );
}

#[tokio::test]
async fn a_bulk_retry_counts_first_acts_only_on_the_confirmed_count_and_is_one_audit_entry() {
    let Some(s) = Server::start(tokens(), None).await else {
        return;
    };
    let failed = failed_runs(&s, 1_000).await;
    let filter = json!({ "status": "failed", "code": "routes_exhausted" });
    let dry = json!({ "action": "retry", "filter": filter, "dry_run": true });
    let (status, _) = call(&s, "POST", "/v1/runs:bulk", API, dry.clone()).await;
    assert_eq!(status, 403, "the operator's alone");
    let (status, counted) = call(&s, "POST", "/v1/runs:bulk", ADMIN, dry).await;
    assert_eq!(
        (status, &counted["matched"]),
        (200, &json!(1_000)),
        "{counted}"
    );
    assert_eq!(s.stored_runs().await, 1_000, "a dry run acts on nothing");

    for (body, want) in [
        (json!({ "action": "retry", "filter": filter }), 400),
        (
            json!({ "action": "retry", "filter": filter, "expect": 999 }),
            409,
        ),
        (
            json!({ "action": "retry", "filter": { "status": "queued" }, "expect": 0 }),
            400,
        ),
        (
            json!({ "action": "explode", "filter": filter, "expect": 1_000 }),
            400,
        ),
        (
            json!({ "action": "retry", "filter": { "cursor": "x" }, "expect": 1_000 }),
            400,
        ),
        (
            json!({ "action": "retry", "filter": { "user_id": "a b" }, "expect": 1_000 }),
            400,
        ),
    ] {
        let (status, err) = call(&s, "POST", "/v1/runs:bulk", ADMIN, body.clone()).await;
        assert_eq!(status, want, "{body}: {err}");
    }
    assert_eq!(
        s.stored_runs().await,
        1_000,
        "a refused bulk action acts on nothing"
    );

    let go = json!({ "action": "retry", "filter": filter, "expect": 1_000 });
    let (status, done) = call(&s, "POST", "/v1/runs:bulk", ADMIN, go).await;
    assert_eq!(status, 200, "{done}");
    assert_eq!(
        (&done["done"], &done["skipped"]),
        (&json!(1_000), &json!(0)),
        "{done}"
    );
    assert!(
        done["message"].as_str().unwrap().contains("limiter"),
        "{done}"
    );
    assert_eq!(s.stored_runs().await, 2_000, "one new run per failed run");
    let depth = s.enqueuer.queue().depths().await.unwrap();
    assert_eq!(depth.waiting, 2_000, "the retries are queued like any run");
    for id in &failed {
        let rec = s.store.run(id).await.unwrap().unwrap();
        assert_eq!(
            rec.status,
            RunStatus::Failed,
            "the originals stay as they were"
        );
    }
    let entries = audit(&s).await;
    assert_eq!(entries.len(), 1, "one action, one entry: {entries:?}");
    assert_eq!(entries[0]["action"], "bulk_retry");
    assert_eq!(
        entries[0]["target"],
        "status in (failed) · code routes_exhausted"
    );

    // Cancel every queued run of one user: the retries of u0, not its failed originals.
    let filter = json!({ "user_id": "u0" });
    let dry = json!({ "action": "cancel", "filter": filter, "dry_run": true });
    let (_, counted) = call(&s, "POST", "/v1/runs:bulk", ADMIN, dry).await;
    assert_eq!(counted["matched"], 334, "{counted}");
    let go = json!({ "action": "cancel", "filter": filter, "expect": 334 });
    let (status, done) = call(&s, "POST", "/v1/runs:bulk", ADMIN, go).await;
    assert_eq!((status, &done["done"]), (200, &json!(334)), "{done}");
    let page = s
        .store
        .count_runs(&freeway::store::RunFilter {
            user_id: Some("u0".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(page.contains(&(RunStatus::Cancelled, 334)), "{page:?}");
}

#[tokio::test]
async fn the_audit_trail_is_the_operators_and_pages_by_its_own_cursor() {
    let Some(s) = Server::start(tokens(), None).await else {
        return;
    };
    let (status, _) = call(&s, "GET", "/v1/audit", API, Value::Null).await;
    assert_eq!(status, 403);
    for bad in ["limit=0", "limit=201", "before=not-an-id", "since=1"] {
        let (status, err) = call(&s, "GET", &format!("/v1/audit?{bad}"), ADMIN, Value::Null).await;
        assert_eq!((status, code(&err)), (400, "invalid_request"), "{bad}");
    }
    let ids = failed_runs(&s, 3).await;
    for id in &ids {
        let (status, _) = call(
            &s,
            "POST",
            &format!("/v1/runs/{id}/retry"),
            ADMIN,
            Value::Null,
        )
        .await;
        assert_eq!(status, 202);
    }
    let (_, first) = call(&s, "GET", "/v1/audit?limit=2", ADMIN, Value::Null).await;
    let next = first["next"].as_str().expect("a next page");
    let (_, second) = call(
        &s,
        "GET",
        &format!("/v1/audit?limit=2&before={next}"),
        ADMIN,
        Value::Null,
    )
    .await;
    let targets: Vec<&str> = first["entries"]
        .as_array()
        .unwrap()
        .iter()
        .chain(second["entries"].as_array().unwrap())
        .map(|e| e["target"].as_str().unwrap())
        .collect();
    let newest_first: Vec<&str> = ids.iter().rev().map(String::as_str).collect();
    assert_eq!(targets, newest_first);
    assert!(second["next"].is_null(), "{second}");
}

/// The day's totals count the runs that ended, by status, in ten-minute buckets of the last
/// 24 hours; a run still queued is not counted. A reading serves every board for ten seconds.
#[tokio::test]
async fn the_days_totals_count_ended_runs_by_status_in_ten_minute_buckets() {
    let Some(s) = Server::start(tokens(), None).await else {
        return;
    };
    failed_runs(&s, 3).await;
    let body = run_body("u1", "vendor/m");
    let (status, _) = call(&s, "POST", "/v1/runs", API, body).await;
    assert_eq!(status, 202, "a queued run, not counted");
    let (status, totals) = call(&s, "GET", "/v1/board/totals", API, Value::Null).await;
    assert_eq!(status, 200, "{totals}");
    assert_eq!(
        (&totals["bucket_ms"], &totals["buckets"]),
        (&json!(600_000), &json!(144))
    );
    let from = totals["from_ms"].as_u64().unwrap();
    let now = freeway::clock::epoch_ms();
    assert_eq!(from % 600_000, 0, "whole buckets");
    assert!(
        from + 24 * 3_600_000 > now && from + 23 * 3_600_000 < now,
        "{totals}"
    );
    let counts = totals["counts"].as_array().unwrap();
    let last = (now - from) / 600_000;
    assert_eq!(
        counts.as_slice(),
        [json!({ "status": "failed", "bucket": last, "runs": 3 })],
        "{totals}"
    );
    // Every board polls them: one reading serves them all for ten seconds.
    failed_runs(&s, 2).await;
    let (_, again) = call(&s, "GET", "/v1/board/totals", API, Value::Null).await;
    assert_eq!(again, totals, "read once for ten seconds");
}

/// A bulk cancel says what became of the runs: the waiting ones are cancelled, and a run that was
/// running is not counted cancelled: it stops before its next call (or ends on its own, when the
/// call it is in is its last). (A bulk cancel counted as cancelled runs that were mid-call and
/// then succeeded.)
#[tokio::test]
async fn a_bulk_cancel_counts_running_runs_apart_from_the_cancelled() {
    let Some(s) = Server::start(tokens(), None).await else {
        return;
    };
    let mut ids = Vec::new();
    for _ in 0..5 {
        let (status, run) = call(&s, "POST", "/v1/runs", API, run_body("ux", "vendor/m")).await;
        assert_eq!(status, 202, "{run}");
        ids.push(run["run_id"].as_str().expect("a run id").to_string());
    }
    for id in &ids[..2] {
        let mut rec = s.store.run(id).await.unwrap().unwrap();
        rec.status = RunStatus::Running;
        s.store.save_run(&rec).await.unwrap();
    }
    let filter = json!({ "user_id": "ux" });
    let go = json!({ "action": "cancel", "filter": filter, "expect": 5 });
    let (status, done) = call(&s, "POST", "/v1/runs:bulk", ADMIN, go).await;
    assert_eq!(status, 200, "{done}");
    assert_eq!(
        (&done["done"], &done["stopping"], &done["ended"]),
        (&json!(3), &json!(2), &json!(0)),
        "{done}"
    );
    assert!(
        done["message"]
            .as_str()
            .unwrap()
            .contains("2 running ones stop before their next call"),
        "{done}"
    );
}
