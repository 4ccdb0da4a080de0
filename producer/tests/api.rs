//! The HTTP API of docs/api.md §5.1 against real parts: Redis (`REDIS_URL`), the SQL store on a
//! temporary SQLite file and the router served in-process. Each test has its own namespace and
//! store, so they run in parallel.

mod common;

use common::{JsonBody, SECRET_HEX, Server, json_of, run_body};
use freeway::chat::{ToolCall, Usage};
use freeway::classify::{RestLength, RestScope};
use freeway::events::Event;
use freeway::provider::ApiKey;
use freeway::rest::{RedisRests, Rests};
use freeway::run::RunStatus;
use freeway::store::{SecretKey, Store};
use producer::api::auth::Tokens;
use serde_json::{Value, json};

const POOL: &str = "openrouter-free";

fn tokens() -> Tokens {
    Tokens {
        api: Some(ApiKey::new("api-token-1")),
        admin: Some(ApiKey::new("admin-token-1")),
        metrics: None,
    }
}

fn rests(s: &Server) -> RedisRests {
    RedisRests::new(s.conn.clone(), s.ns.clone())
}

async fn rest_pool(s: &Server, ms: u64) {
    rests(s)
        .write(
            &RestScope::Pool(POOL.into()),
            RestLength::For(ms),
            "test rest",
        )
        .await
        .expect("rest written");
}

/// The `error.code` of an error body.
fn code(body: &Value) -> &str {
    body["error"]["code"].as_str().unwrap_or("<no code>")
}

#[tokio::test]
async fn a_run_is_accepted_recorded_and_queued() {
    let s = Server::open().await;
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
    let s = Server::open().await;
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

#[tokio::test]
async fn a_body_over_256_kib_is_413() {
    let s = Server::open().await;
    let big =
        json!({ "user_id": "u1", "input": "x".repeat(256 * 1024), "routes": [{ "model": "m" }] });
    let resp = s
        .http
        .post(s.url("/v1/runs"))
        .json_body(&big)
        .send()
        .await
        .expect("POST");
    assert_eq!(resp.status().as_u16(), 413);
    let err: Value = json_of(resp).await;
    assert_eq!(code(&err), "payload_too_large");
    assert_eq!(s.stored_runs().await, 0);
}

#[tokio::test]
async fn with_an_api_token_every_v1_route_needs_it() {
    let s = Server::start(tokens(), None).await;
    for auth in [
        None,
        Some("Bearer wrong"),
        Some("api-token-1"),
        Some("Basic x"),
    ] {
        let mut req = s.http.get(s.url("/v1/rests"));
        if let Some(a) = auth {
            req = req.header("authorization", a);
        }
        let resp = req.send().await.expect("GET");
        assert_eq!(resp.status().as_u16(), 401, "{auth:?}");
        let err: Value = json_of(resp).await;
        assert_eq!(code(&err), "unauthorized");
    }
    let resp = s
        .http
        .post(s.url("/v1/runs"))
        .json_body(&run_body("u1", "m"))
        .send()
        .await
        .expect("POST");
    assert_eq!(resp.status().as_u16(), 401);
    assert_eq!(s.stored_runs().await, 0);
    for token in ["api-token-1", "admin-token-1"] {
        let resp = s
            .http
            .get(s.url("/v1/rests"))
            .bearer_auth(token)
            .send()
            .await
            .expect("GET");
        assert_eq!(resp.status().as_u16(), 200, "{token}");
    }
    // Outside /v1: no token needed.
    let resp = s.http.get(s.url("/healthz")).send().await.expect("GET");
    assert_eq!(resp.status().as_u16(), 200);
}

#[tokio::test]
async fn a_resting_pool_refuses_with_retry_after_and_writes_nothing() {
    let s = Server::open().await;
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
}

#[tokio::test]
async fn a_chain_with_a_resting_off_quota_route_is_routes_resting() {
    let s = Server::open().await;
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

#[tokio::test]
async fn an_idempotency_key_gives_the_same_run_once() {
    let s = Server::open().await;
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

/// An SSE body's events as (id, event, data).
fn sse_events(body: &str) -> Vec<(String, String, String)> {
    body.split("\n\n")
        .filter_map(|block| {
            let field = |name: &str| {
                block
                    .lines()
                    .find_map(|l| l.strip_prefix(&format!("{name}: ")))
                    .map(str::to_string)
            };
            Some((
                field("id").unwrap_or_default(),
                field("event")?,
                field("data")?,
            ))
        })
        .collect()
}

async fn read_events(s: &Server, run_id: &str, last_event_id: Option<&str>) -> (u16, String) {
    let mut req = s.http.get(s.url(&format!("/v1/runs/{run_id}/events")));
    if let Some(id) = last_event_id {
        req = req.header("last-event-id", id);
    }
    let resp = req.send().await.expect("GET events");
    let status = resp.status().as_u16();
    (status, resp.text().await.expect("the whole body"))
}

#[tokio::test]
async fn events_are_relayed_in_order_and_resume_after_last_event_id() {
    let s = Server::open().await;
    let (_, body) = s.post_run(&run_body("u1", "vendor/m")).await;
    let run_id = body["run_id"].as_str().expect("run id").to_string();
    s.publish(
        &run_id,
        &[
            Event::Started {
                worker: "w1".into(),
            },
            Event::Delta { text: "Hel".into() },
            Event::Delta { text: "lo".into() },
            Event::Finished {
                status: RunStatus::Succeeded,
                code: None,
                usage: Usage::default(),
            },
            // After the last event: never relayed.
            Event::Delta {
                text: "late".into(),
            },
        ],
    )
    .await;

    let (status, text) = read_events(&s, &run_id, None).await;
    assert_eq!(status, 200);
    let events = sse_events(&text);
    let kinds: Vec<&str> = events.iter().map(|e| e.1.as_str()).collect();
    assert_eq!(kinds, ["queued", "started", "delta", "delta", "finished"]);
    let texts: Vec<Value> = events
        .iter()
        .map(|e| serde_json::from_str(&e.2).expect("event JSON"))
        .collect();
    assert_eq!(texts[2], json!({ "type": "delta", "text": "Hel" }));
    assert_eq!(texts[4]["status"], "succeeded");

    let (_, text) = read_events(&s, &run_id, Some(&events[2].0)).await;
    let resumed = sse_events(&text);
    assert_eq!(resumed, events[3..].to_vec());

    // A client that saw the end and reconnects gets an empty stream that closes at once.
    let (status, text) = read_events(&s, &run_id, Some(&events[4].0)).await;
    assert_eq!(status, 200);
    assert!(sse_events(&text).is_empty(), "{text}");
}

#[tokio::test]
async fn the_events_of_a_settled_run_whose_stream_expired_close_at_once() {
    let s = Server::open().await;
    let (_, body) = s.post_run(&run_body("u1", "vendor/m")).await;
    let run_id = body["run_id"].as_str().expect("run id");
    let mut rec = s.store.run(run_id).await.expect("read").expect("run");
    rec.status = RunStatus::Succeeded;
    s.store.save_run(&rec).await.expect("saved");
    let mut conn = s.conn.clone();
    let deleted: i64 = redis::cmd("DEL")
        .arg(freeway::events::stream_key(&s.ns, run_id))
        .query_async(&mut conn)
        .await
        .expect("DEL");
    assert_eq!(deleted, 1);
    let started = std::time::Instant::now();
    let (status, text) = read_events(&s, run_id, None).await;
    assert_eq!(status, 200);
    let events = sse_events(&text);
    assert_eq!(
        events.len(),
        1,
        "only the last event, from the store: {text}"
    );
    assert_eq!(events[0].1, "finished", "{text}");
    assert!(events[0].2.contains(r#""status":"succeeded""#), "{text}");
    assert!(
        started.elapsed() < producer::stream::BLOCK,
        "closed without waiting for a read to time out"
    );
}

#[tokio::test]
async fn events_of_an_unknown_run_or_from_a_bad_position_are_refused() {
    let s = Server::open().await;
    let (status, _) = read_events(&s, "run_nope", None).await;
    assert_eq!(status, 404);
    let (_, body) = s.post_run(&run_body("u1", "vendor/m")).await;
    let run_id = body["run_id"].as_str().expect("run id");
    let (status, text) = read_events(&s, run_id, Some("not-an-id")).await;
    assert_eq!(status, 400, "{text}");
}

/// Enqueue a run with a tool that needs approval and make it wait on `call_1`, as the worker
/// would.
async fn awaiting_run(s: &Server) -> String {
    let body = json!({ "user_id": "u1", "input": "mail Bob", "routes": [{ "model": "vendor/m" }],
        "tools": [{ "name": "send_email", "approval": "required" }] });
    let (status, body) = s.post_run(&body).await;
    assert_eq!(status, 202, "{body}");
    let run_id = body["run_id"].as_str().expect("run id").to_string();
    let mut rec = s.store.run(&run_id).await.expect("read").expect("run");
    rec.status = RunStatus::AwaitingApproval;
    rec.pending_tool_call = Some(ToolCall {
        id: "call_1".into(),
        name: "send_email".into(),
        arguments: r#"{"to":"bob"}"#.into(),
    });
    s.store.save_run(&rec).await.expect("saved");
    run_id
}

async fn approve(s: &Server, run_id: &str, body: Value) -> (u16, Value) {
    let resp = s
        .http
        .post(s.url(&format!("/v1/runs/{run_id}/approvals")))
        .json_body(&body)
        .send()
        .await
        .expect("POST approvals");
    let status = resp.status().as_u16();
    (status, json_of(resp).await)
}

#[tokio::test]
async fn an_approval_conflicts_unless_the_run_awaits_that_call() {
    let s = Server::open().await;
    let (_, body) = s.post_run(&run_body("u1", "vendor/m")).await;
    let queued = body["run_id"].as_str().expect("run id");
    let yes = json!({ "tool_call_id": "call_1", "decision": "approve" });
    let (status, err) = approve(&s, queued, yes.clone()).await;
    assert_eq!((status, code(&err)), (409, "conflict"), "{err}");

    let waiting = awaiting_run(&s).await;
    let wrong = json!({ "tool_call_id": "call_9", "decision": "approve" });
    let (status, err) = approve(&s, &waiting, wrong).await;
    assert_eq!((status, code(&err)), (409, "conflict"), "{err}");
    let (status, err) = approve(
        &s,
        &waiting,
        json!({ "tool_call_id": "call_1", "decision": "maybe" }),
    )
    .await;
    assert_eq!((status, code(&err)), (400, "invalid_request"), "{err}");
    let (status, _) = approve(&s, "run_nope", yes).await;
    assert_eq!(status, 404);
    assert_eq!(
        s.enqueuer.queue().depths().await.expect("depths").waiting,
        2
    );
}

#[tokio::test]
async fn an_approval_enqueues_one_continuation() {
    let s = Server::open().await;
    let parent = awaiting_run(&s).await;
    let parent_job = s.enqueuer.job(&parent).await.expect("read").expect("kept");
    let yes = json!({ "tool_call_id": "call_1", "decision": "approve", "result": "sent" });
    let (status, body) = approve(&s, &parent, yes.clone()).await;
    assert_eq!(status, 202, "{body}");
    let child = body["run_id"].as_str().expect("continuation id");
    assert_ne!(child, parent);

    let (_, run) = s.get_json(&format!("/v1/runs/{child}")).await;
    assert_eq!(run["status"], "queued");
    assert_eq!(run["parent_run_id"], parent.as_str());
    assert_eq!(run["conversation_id"], parent_job.conversation_id.as_str());
    let job = s.enqueuer.job(child).await.expect("read").expect("kept");
    let c = job.continuation.expect("a continuation");
    assert_eq!(
        (
            c.parent_run_id.as_str(),
            c.tool_call.id.as_str(),
            c.result.as_str()
        ),
        (parent.as_str(), "call_1", "sent")
    );
    assert_eq!(job.conversation_id, parent_job.conversation_id);
    assert_eq!(job.request.tools, parent_job.request.tools);
    assert_eq!(
        s.enqueuer.queue().depths().await.expect("depths").waiting,
        2
    );

    let (_, run) = s.get_json(&format!("/v1/runs/{parent}")).await;
    assert_eq!(run["status"], "succeeded");
    assert_eq!(run["pending_approval"], Value::Null);
    let answered = &run["approvals"][0];
    assert_eq!(
        (
            &answered["tool_call"]["id"],
            &answered["decided"]["decision"],
            &answered["decided"]["result"],
            &answered["decided"]["continuation_run_id"],
        ),
        (
            &json!("call_1"),
            &json!("approve"),
            &json!("sent"),
            &json!(child)
        ),
        "the parent keeps who was answered what: {run}"
    );
    let (status, err) = approve(&s, &parent, yes).await;
    assert_eq!((status, code(&err)), (409, "conflict"), "{err}");
    assert_eq!(
        s.enqueuer.queue().depths().await.expect("depths").waiting,
        2
    );
}

#[tokio::test]
async fn a_denial_tells_the_model_the_user_said_no() {
    let s = Server::open().await;
    let parent = awaiting_run(&s).await;
    let (status, body) = approve(
        &s,
        &parent,
        json!({ "tool_call_id": "call_1", "decision": "deny" }),
    )
    .await;
    assert_eq!(status, 202, "{body}");
    let child = body["run_id"].as_str().expect("continuation id");
    let job = s.enqueuer.job(child).await.expect("read").expect("kept");
    assert_eq!(
        job.continuation.expect("continuation").result,
        "denied by the user"
    );
}

#[tokio::test]
async fn a_connection_key_is_stored_sealed_and_never_echoed() {
    const KEY: &str = "sk-user-very-secret-0123456789";
    let s = Server::start(
        Tokens::default(),
        Some(SecretKey::from_hex(SECRET_HEX).expect("hex")),
    )
    .await;
    let put = |user: &str| {
        s.http
            .put(s.url("/v1/connections/conn_a"))
            .json_body(&json!({ "user_id": user, "provider": "openrouter", "api_key": KEY }))
            .send()
    };
    let resp = put("u1").await.expect("PUT");
    assert_eq!(resp.status().as_u16(), 204);
    assert!(resp.text().await.expect("body").is_empty());
    let info = s
        .store
        .connection("conn_a")
        .await
        .expect("read")
        .expect("stored");
    assert_eq!(
        (info.user_id.as_str(), info.provider.as_str()),
        ("u1", "openrouter")
    );
    for file in ["freeway.db", "freeway.db-wal"] {
        let bytes = std::fs::read(s.db_path.with_file_name(file)).unwrap_or_default();
        assert!(
            !String::from_utf8_lossy(&bytes).contains(KEY),
            "{file} holds the key"
        );
    }
    // Someone else's id.
    let resp = put("u2").await.expect("PUT");
    assert_eq!(resp.status().as_u16(), 409);
    assert!(!resp.text().await.expect("body").contains(KEY));
    let resp = s
        .http
        .put(s.url("/v1/connections/conn_b"))
        .json_body(&json!({ "user_id": "u1", "provider": "openrouter" }))
        .send()
        .await
        .expect("PUT");
    assert_eq!(resp.status().as_u16(), 400);

    let delete = |query: &str| {
        s.http
            .delete(s.url(&format!("/v1/connections/conn_a{query}")))
            .send()
    };
    assert_eq!(
        delete("?user_id=u2")
            .await
            .expect("DELETE")
            .status()
            .as_u16(),
        404
    );
    assert_eq!(
        delete("?user_id=u1")
            .await
            .expect("DELETE")
            .status()
            .as_u16(),
        204
    );
    assert!(s.store.connection("conn_a").await.expect("read").is_none());
    assert_eq!(
        delete("?user_id=u1")
            .await
            .expect("DELETE")
            .status()
            .as_u16(),
        404
    );
}

#[tokio::test]
async fn connections_need_the_secret_key() {
    let s = Server::open().await;
    let resp = s
        .http
        .put(s.url("/v1/connections/conn_a"))
        .json_body(&json!({ "user_id": "u1", "provider": "openrouter", "api_key": "sk-x" }))
        .send()
        .await
        .expect("PUT");
    assert_eq!(resp.status().as_u16(), 503);
    let err: Value = json_of(resp).await;
    assert_eq!(code(&err), "not_configured");
    assert!(s.store.connection("conn_a").await.expect("read").is_none());
}

#[tokio::test]
async fn rests_are_listed_and_cleared_only_with_the_admin_token() {
    let s = Server::start(tokens(), None).await;
    rest_pool(&s, 30_000).await;
    rests(&s)
        .write(
            &RestScope::Route {
                pool: Some(POOL.into()),
                route_key: "platform:openrouter/vendor/m:free".into(),
            },
            RestLength::For(20_000),
            "high demand",
        )
        .await
        .expect("rest written");
    let resp = s
        .http
        .get(s.url("/v1/rests"))
        .bearer_auth("api-token-1")
        .send()
        .await
        .expect("GET");
    let list: Value = json_of(resp).await;
    let rests = list["rests"].as_array().expect("a list");
    assert_eq!(rests.len(), 2, "{list}");
    assert_eq!(rests[0]["scope"], "pool");
    assert_eq!(rests[0]["key"], POOL);
    assert_eq!(rests[0]["reason"], "test rest");
    assert!(
        rests[0]["remaining_ms"]
            .as_u64()
            .is_some_and(|ms| ms > 0 && ms <= 30_000)
    );
    assert_eq!(rests[1]["key"], "platform:openrouter/vendor/m:free");

    let clear = |path: &str, token: Option<&str>| {
        let mut req = s.http.delete(s.url(path));
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        req.send()
    };
    let pool_path = format!("/v1/rests/pool/{POOL}");
    let resp = clear(&pool_path, None).await.expect("DELETE");
    assert_eq!(resp.status().as_u16(), 401);
    let resp = clear(&pool_path, Some("api-token-1"))
        .await
        .expect("DELETE");
    assert_eq!(resp.status().as_u16(), 403);
    let err: Value = json_of(resp).await;
    assert_eq!(code(&err), "unauthorized");
    assert_eq!(
        s.keys(&format!("{{{POOL}}}:rest")).await.len(),
        1,
        "the rest stays"
    );

    let resp = clear(&pool_path, Some("admin-token-1"))
        .await
        .expect("DELETE");
    assert_eq!(resp.status().as_u16(), 204);
    let resp = clear(
        "/v1/rests/route/platform:openrouter/vendor/m:free",
        Some("admin-token-1"),
    )
    .await
    .expect("DELETE");
    assert_eq!(resp.status().as_u16(), 204);
    let resp = clear(&pool_path, Some("admin-token-1"))
        .await
        .expect("DELETE");
    assert_eq!(resp.status().as_u16(), 404);
    let resp = clear("/v1/rests/planet/x", Some("admin-token-1"))
        .await
        .expect("DELETE");
    assert_eq!(resp.status().as_u16(), 400);
    let resp = s
        .http
        .get(s.url("/v1/rests"))
        .bearer_auth("admin-token-1")
        .send()
        .await
        .expect("GET");
    let list: Value = json_of(resp).await;
    assert_eq!(list, json!({ "rests": [] }));
}

#[tokio::test]
async fn healthz_names_what_fails() {
    let s = Server::open().await;
    let (status, body) = s.get_json("/healthz").await;
    assert_eq!(status, 200);
    assert_eq!(body, json!({ "redis": "ok", "store": "ok" }));
    s.store.close().await;
    let (status, body) = s.get_json("/healthz").await;
    assert_eq!(status, 503);
    assert_eq!(body, json!({ "redis": "ok", "store": "failed" }));
}

#[tokio::test]
async fn metrics_show_queue_depths_and_rests() {
    let s = Server::open().await;
    s.post_run(&run_body("u1", "vendor/m")).await;
    rest_pool(&s, 30_000).await;
    let resp = s.http.get(s.url("/metrics")).send().await.expect("GET");
    assert_eq!(resp.status().as_u16(), 200);
    let kind = resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    assert!(kind.is_some_and(|k| k.starts_with("text/plain")));
    let text = resp.text().await.expect("text");
    for line in [
        "# TYPE freeway_queue_jobs gauge",
        "freeway_queue_jobs{state=\"waiting\"} 1",
        "freeway_queue_jobs{state=\"dead\"} 0",
        "# TYPE freeway_active_rests gauge",
        "freeway_active_rests{scope=\"pool\"} 1",
        "freeway_active_rests{scope=\"route\"} 0",
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "{line} missing from\n{text}"
        );
    }
}

#[tokio::test]
async fn unknown_routes_wrong_methods_and_unknown_runs_use_the_error_envelope() {
    let s = Server::open().await;
    let (status, err) = s.get_json("/nope").await;
    assert_eq!((status, code(&err)), (404, "not_found"));
    let (status, err) = s.get_json("/v1/runs/run_nope").await;
    assert_eq!((status, code(&err)), (404, "not_found"));
    let resp = s
        .http
        .delete(s.url("/v1/runs"))
        .send()
        .await
        .expect("DELETE");
    assert_eq!(resp.status().as_u16(), 405);
    let err: Value = json_of(resp).await;
    assert_eq!(code(&err), "method_not_allowed");
}

#[tokio::test]
async fn a_run_on_another_users_conversation_is_not_found_and_nothing_is_written() {
    let s = Server::open().await;
    let first = json!({ "user_id": "u1", "input": "hello", "routes": [{ "model": "vendor/m" }] });
    let (status, body) = s.post_run(&first).await;
    assert_eq!(status, 202, "{body}");
    let run_id = body["run_id"].as_str().expect("run id");
    let (_, run) = s.get_json(&format!("/v1/runs/{run_id}")).await;
    let conversation = run["conversation_id"]
        .as_str()
        .expect("conversation")
        .to_string();

    let mut theirs = first.clone();
    theirs["user_id"] = json!("u2");
    theirs["conversation_id"] = json!(conversation);
    let (status, err) = s.post_run(&theirs).await;
    assert_eq!((status, code(&err)), (404, "not_found"), "{err}");
    assert_eq!(
        err["error"]["message"],
        format!("conversation {conversation} not found")
    );
    assert_eq!(s.stored_runs().await, 1, "nothing was written");
    assert_eq!(
        s.enqueuer.queue().depths().await.expect("depths").waiting,
        1,
        "nothing was enqueued"
    );

    let mut mine = first.clone();
    mine["conversation_id"] = json!(conversation);
    let (status, body) = s.post_run(&mine).await;
    assert_eq!(status, 202, "the owner goes on with it: {body}");
    let mut fresh = theirs.clone();
    fresh["conversation_id"] = json!("conv_of_u2");
    let (status, body) = s.post_run(&fresh).await;
    assert_eq!(
        status, 202,
        "a conversation nobody has is anyone's to open: {body}"
    );
}

#[tokio::test]
async fn where_a_user_is_named_another_users_run_is_not_found() {
    let s = Server::open().await;
    let run_id = awaiting_run(&s).await;
    let (status, _) = s.get_json(&format!("/v1/runs/{run_id}?user_id=u1")).await;
    assert_eq!(status, 200, "the owner sees it");
    let (status, _) = s.get_json(&format!("/v1/runs/{run_id}")).await;
    assert_eq!(status, 200, "an unscoped (operator) request sees it");
    for path in [
        format!("/v1/runs/{run_id}?user_id=u2"),
        format!("/v1/runs/{run_id}/events?user_id=u2"),
        format!("/v1/board/runs/{run_id}?user_id=u2"),
    ] {
        let (status, err) = s.get_json(&path).await;
        assert_eq!(
            (status, code(&err)),
            (404, "not_found"),
            "{path}: like a run that does not exist"
        );
        assert_eq!(
            err["error"]["message"],
            format!("run {run_id} not found"),
            "{path}: the same words as for no run"
        );
    }
    let resp = s
        .http
        .post(s.url(&format!("/v1/runs/{run_id}/approvals?user_id=u2")))
        .json_body(&json!({ "tool_call_id": "call_1", "decision": "approve" }))
        .send()
        .await
        .expect("POST");
    assert_eq!(
        resp.status().as_u16(),
        404,
        "nobody approves another's call"
    );
    assert_eq!(s.stored_runs().await, 1, "no continuation was enqueued");
    let (_, mine) = s.get_json("/v1/board/runs?user_id=u1").await;
    assert_eq!(mine["runs"].as_array().map(Vec::len), Some(1));
    let (_, theirs) = s.get_json("/v1/board/runs?user_id=u2").await;
    assert_eq!(theirs, json!({ "runs": [] }));
    for bad in ["?user_id=", "?user=u1"] {
        let (status, err) = s.get_json(&format!("/v1/runs/{run_id}{bad}")).await;
        assert_eq!((status, code(&err)), (400, "invalid_request"), "{bad}");
    }
}

#[tokio::test]
async fn the_board_page_is_served_with_a_strict_policy_and_its_data_needs_the_token() {
    let s = Server::start(tokens(), None).await;
    let resp = s.http.get(s.url("/board")).send().await.expect("GET");
    assert_eq!(resp.status().as_u16(), 200, "the page holds no data");
    let header = |name: &str| {
        resp.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string()
    };
    assert!(header("content-type").starts_with("text/html"));
    let csp = header("content-security-policy");
    assert_eq!(header("x-frame-options"), "DENY");
    let nonce = csp
        .split("'nonce-")
        .nth(1)
        .and_then(|r| r.split('\'').next())
        .expect("a nonce")
        .to_string();
    assert!(csp.starts_with("default-src 'none'"), "{csp}");
    let page = resp.text().await.expect("the page");
    assert!(page.contains(&format!("<script nonce=\"{nonce}\">")));
    assert!(!page.contains("__CSP_NONCE__"));
    assert!(
        !page.contains("http://") && !page.contains("https://"),
        "nothing from elsewhere"
    );
    let again = s.http.get(s.url("/board")).send().await.expect("GET");
    let other = again.text().await.expect("page");
    assert!(!other.contains(&nonce), "a fresh nonce per response");

    for path in [
        "/v1/board/overview",
        "/v1/board/runs",
        "/v1/board/runs/run_x",
    ] {
        let (status, err) = s.get_json(path).await;
        assert_eq!((status, code(&err)), (401, "unauthorized"), "{path}");
    }
    for (token, admin) in [("api-token-1", false), ("admin-token-1", true)] {
        let resp = s
            .http
            .get(s.url("/v1/board/overview"))
            .bearer_auth(token)
            .send()
            .await
            .expect("GET");
        assert_eq!(resp.status().as_u16(), 200);
        let o: Value = json_of(resp).await;
        assert_eq!(
            o["viewer"],
            json!({ "admin": admin, "clear_enabled": true })
        );
        assert_eq!(o["namespace"], s.ns.as_str());
    }
}

#[tokio::test]
async fn the_board_overview_shows_depths_workers_and_rests_with_their_countdown() {
    let s = Server::open().await;
    s.post_run(&run_body("u1", "vendor/m")).await;
    rest_pool(&s, 30_000).await;
    let queue = format!("{}:runs", s.ns);
    let now_s = freeway::clock::epoch_ms() / 1000;
    let mut conn = s.conn.clone();
    let _: () = redis::pipe()
        .zadd(format!("{queue}:workers"), "worker-live", now_s)
        .zadd(format!("{queue}:workers"), "worker-gone", now_s - 3_600)
        .sadd(format!("{queue}:inflight:worker-live"), &["t1", "t2"])
        .query_async(&mut conn)
        .await
        .expect("fake workers");
    let (status, o) = s.get_json("/v1/board/overview").await;
    assert_eq!(status, 200, "{o}");
    assert_eq!(o["depths"]["waiting"], 1);
    assert_eq!(o["depths"]["running"], 2);
    let workers = o["workers"].as_array().expect("workers");
    assert_eq!(workers.len(), 2);
    assert_eq!(workers[0]["name"], "worker-live", "newest heartbeat first");
    assert_eq!(workers[0]["running"], 2);
    assert_eq!(workers[0]["stale"], false);
    assert_eq!(workers[1]["stale"], true);
    assert!(
        workers[1]["age_ms"]
            .as_u64()
            .is_some_and(|a| a >= 3_599_000)
    );
    let rests = o["rests"].as_array().expect("rests");
    assert_eq!(rests.len(), 1);
    assert_eq!(rests[0]["scope"], "pool");
    assert_eq!(rests[0]["reason"], "test rest");
    assert!(
        rests[0]["remaining_ms"]
            .as_u64()
            .is_some_and(|ms| ms > 25_000 && ms <= 30_000)
    );
    assert!(o["now_ms"].as_u64().is_some());
}

#[tokio::test]
async fn the_board_lists_runs_newest_first_and_shows_one_with_its_attempts_events_and_transcript() {
    let s = Server::open().await;
    let mut ids = Vec::new();
    for user in ["u1", "u2", "u3"] {
        let (_, body) = s.post_run(&run_body(user, "vendor/m:free")).await;
        ids.push(body["run_id"].as_str().expect("id").to_string());
        tokio::time::sleep(std::time::Duration::from_millis(3)).await;
    }
    let (status, list) = s.get_json("/v1/board/runs?limit=2").await;
    assert_eq!(status, 200);
    let runs = list["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), 2);
    assert_eq!(runs[0]["run_id"], ids[2].as_str());
    assert_eq!(runs[1]["run_id"], ids[1].as_str());
    assert_eq!(runs[0]["status"], "queued");
    assert_eq!(runs[0]["routes"], json!(["vendor/m:free"]));
    assert_eq!(runs[0]["calls"], 0);
    let (status, _) = s.get_json("/v1/board/runs?limit=x").await;
    assert_eq!(status, 400);

    let run_id = &ids[0];
    let rec = s.store.run(run_id).await.expect("read").expect("run");
    s.store
        .record_attempt(&freeway::run::AttemptRecord {
            run_id: run_id.clone(),
            n: 1,
            step: 1,
            route: "platform:openrouter/vendor/m:free".into(),
            http_status: Some(429),
            error: Some("HTTP 429".into()),
            verdict: Some(freeway::classify::Verdict::Account),
            retry_hint_ms: Some(42_000),
            ratelimit_remaining: Some(0),
            provider_name: None,
            latency_ms: 12,
            t_ms: 1,
        })
        .await
        .expect("attempt");
    s.store
        .append_message(
            &rec.conversation_id,
            run_id,
            "input",
            &freeway::chat::Message::user("hello"),
        )
        .await
        .expect("message");
    s.publish(
        run_id,
        &[
            Event::Queued,
            Event::Delayed {
                until_ms: 99,
                reason: "account on openrouter/vendor/m:free".into(),
            },
        ],
    )
    .await;
    let (status, d) = s.get_json(&format!("/v1/board/runs/{run_id}")).await;
    assert_eq!(status, 200, "{d}");
    assert_eq!(d["run"]["run_id"], run_id.as_str());
    let attempt = &d["run"]["attempts"][0];
    assert_eq!(attempt["http_status"], 429);
    assert_eq!(attempt["verdict"], "account");
    assert_eq!(attempt["retry_hint_ms"], 42_000);
    assert_eq!(attempt["ratelimit_remaining"], 0);
    let kinds: Vec<&str> = d["events"]
        .as_array()
        .expect("events")
        .iter()
        .filter_map(|e| e["type"].as_str())
        .collect();
    assert_eq!(kinds, ["queued", "queued", "delayed"], "oldest first");
    assert_eq!(d["events"][2]["data"]["until_ms"], 99);
    assert_eq!(
        d["transcript"],
        json!([{ "role": "user", "content": "hello" }])
    );
    assert_eq!(d["transcript_total"], 1);
    let (status, _) = s.get_json("/v1/board/runs/run_missing").await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn every_route_with_a_body_refuses_one_over_256_kib_with_413() {
    let s = Server::start(
        tokens(),
        Some(SecretKey::from_hex(SECRET_HEX).expect("key")),
    )
    .await;
    let run_id = "run_any";
    let big = "x".repeat(256 * 1024 + 1);
    for (method, path) in [
        (reqwest::Method::PUT, "/v1/connections/conn_1".to_string()),
        (
            reqwest::Method::POST,
            format!("/v1/runs/{run_id}/approvals"),
        ),
        (reqwest::Method::POST, "/v1/runs".to_string()),
    ] {
        let resp = s
            .http
            .request(method, s.url(&path))
            .bearer_auth("api-token-1")
            .header("content-type", "application/json")
            .body(big.clone())
            .send()
            .await
            .expect("send");
        assert_eq!(resp.status().as_u16(), 413, "{path}");
        let err: Value = json_of(resp).await;
        assert_eq!(code(&err), "payload_too_large", "{path}");
    }
}

/// What a browser's form post or `fetch` without a preflight can send: anything but JSON.
#[tokio::test]
async fn a_body_that_is_not_json_is_415_and_nothing_is_written() {
    let s = Server::start(
        Tokens::default(),
        Some(SecretKey::from_hex(SECRET_HEX).expect("key")),
    )
    .await;
    let run = run_body("u1", "vendor/m").to_string();
    let connection = json!({ "user_id": "u1", "provider": "openrouter", "api_key": "sk-x" });
    let approval = json!({ "tool_call_id": "call_1", "decision": "approve" });
    let run_id = awaiting_run(&s).await;
    let cases = [
        (reqwest::Method::POST, "/v1/runs".to_string(), run.clone()),
        (
            reqwest::Method::PUT,
            "/v1/connections/conn_a".to_string(),
            connection.to_string(),
        ),
        (
            reqwest::Method::POST,
            format!("/v1/runs/{run_id}/approvals"),
            approval.to_string(),
        ),
    ];
    for (method, path, body) in cases {
        for content_type in [
            Some("text/plain"),
            Some("text/plain; charset=utf-8"),
            Some("application/x-www-form-urlencoded"),
            Some("multipart/form-data; boundary=x"),
            Some("application/jsonp"),
            None,
        ] {
            let mut req = s
                .http
                .request(method.clone(), s.url(&path))
                .body(body.clone());
            if let Some(t) = content_type {
                req = req.header("content-type", t);
            }
            let resp = req.send().await.expect("send");
            assert_eq!(
                resp.status().as_u16(),
                415,
                "{method} {path} {content_type:?}"
            );
            let err: Value = json_of(resp).await;
            assert_eq!(code(&err), "unsupported_media_type", "{path}");
        }
    }
    assert_eq!(s.stored_runs().await, 1, "only the awaiting run");
    assert_eq!(
        s.enqueuer.queue().depths().await.expect("depths").waiting,
        1,
        "nothing was enqueued"
    );
    assert!(s.store.connection("conn_a").await.expect("read").is_none());

    // JSON is JSON whatever its parameters and case.
    for content_type in ["application/json; charset=utf-8", "Application/JSON"] {
        let resp = s
            .http
            .post(s.url("/v1/runs"))
            .header("content-type", content_type)
            .body(run.clone())
            .send()
            .await
            .expect("POST");
        assert_eq!(resp.status().as_u16(), 202, "{content_type}");
    }
    // A request without a body needs no content type.
    let resp = s
        .http
        .delete(s.url("/v1/connections/conn_a?user_id=u1"))
        .send()
        .await
        .expect("DELETE");
    assert_eq!(resp.status().as_u16(), 404);
}

/// A GET with this `Host` (or `Origin`) header: `(status, JSON body)`.
async fn get_with(s: &Server, path: &str, header: &str, value: &str) -> (u16, Value) {
    let resp = s
        .http
        .get(s.url(path))
        .header(header, value)
        .send()
        .await
        .expect("GET");
    let status = resp.status().as_u16();
    (status, json_of(resp).await)
}

const FOREIGN_HOSTS: [&str; 7] = [
    "evil.example",
    "evil.example:8080",
    "127.0.0.1.evil.example",
    "localhost.evil.example",
    "10.0.0.1",
    "[::2]:8080",
    "localhost:x",
];

#[tokio::test]
async fn a_foreign_host_is_421_and_a_cross_site_origin_403_unless_a_token_guards_the_api() {
    let s = Server::open().await;
    // Every route, the board and the probes included: a rebound name reaches none of them.
    for path in ["/v1/rests", "/board", "/metrics", "/healthz", "/nope"] {
        for host in FOREIGN_HOSTS {
            let (status, err) = get_with(&s, path, "host", host).await;
            assert_eq!((status, code(&err)), (421, "forbidden"), "{path} {host}");
        }
    }
    for origin in [
        "https://evil.example",
        "http://localhost.evil.example:8080",
        "http://127.0.0.1.evil.example",
        "null",
    ] {
        let (status, err) = get_with(&s, "/v1/rests", "origin", origin).await;
        assert_eq!((status, code(&err)), (403, "forbidden"), "{origin}");
        let resp = s
            .http
            .post(s.url("/v1/runs"))
            .header("origin", origin)
            .json_body(&run_body("u1", "vendor/m"))
            .send()
            .await
            .expect("POST");
        assert_eq!(resp.status().as_u16(), 403, "{origin}");
    }
    let resp = s
        .http
        .post(s.url("/v1/runs"))
        .header("host", "evil.example")
        .json_body(&run_body("u1", "vendor/m"))
        .send()
        .await
        .expect("POST");
    assert_eq!(resp.status().as_u16(), 421);
    assert_eq!(s.stored_runs().await, 0, "nothing was written");
    assert!(s.keys("job:*").await.is_empty(), "nothing was enqueued");

    for host in [
        "localhost",
        "LocalHost:8080",
        "127.0.0.1",
        "127.1.2.3:9",
        "[::1]",
        "[::1]:8080",
    ] {
        let (status, body) = get_with(&s, "/v1/rests", "host", host).await;
        assert_eq!(status, 200, "{host}: {body}");
    }
    for origin in [
        "http://localhost:3000",
        "http://127.0.0.1:8080",
        "https://[::1]",
    ] {
        let (status, body) = get_with(&s, "/v1/rests", "origin", origin).await;
        assert_eq!(status, 200, "{origin}: {body}");
    }

    // With a token, the token is the protection: a proxy's name and a web app's origin pass.
    let s = Server::start(tokens(), None).await;
    for (header, value) in [
        ("host", "freeway.example.com"),
        ("origin", "https://app.example.com"),
    ] {
        let resp = s
            .http
            .get(s.url("/v1/rests"))
            .header(header, value)
            .bearer_auth("api-token-1")
            .send()
            .await
            .expect("GET");
        assert_eq!(resp.status().as_u16(), 200, "{header}: {value}");
        let (status, err) = get_with(&s, "/v1/rests", header, value).await;
        assert_eq!((status, code(&err)), (401, "unauthorized"), "{header}");
    }
}

#[tokio::test]
async fn with_an_api_or_metrics_token_metrics_need_a_token() {
    let s = Server::start(tokens(), None).await;
    for auth in [None, Some("Bearer wrong")] {
        let mut req = s.http.get(s.url("/metrics"));
        if let Some(a) = auth {
            req = req.header("authorization", a);
        }
        let resp = req.send().await.expect("GET");
        assert_eq!(resp.status().as_u16(), 401, "{auth:?}");
        let err: Value = json_of(resp).await;
        assert_eq!(code(&err), "unauthorized");
    }
    for token in ["api-token-1", "admin-token-1"] {
        let resp = s
            .http
            .get(s.url("/metrics"))
            .bearer_auth(token)
            .send()
            .await
            .expect("GET");
        assert_eq!(resp.status().as_u16(), 200, "{token}");
        assert!(
            resp.text()
                .await
                .expect("text")
                .contains("freeway_queue_jobs")
        );
    }

    // A scraper's own token opens /metrics, and nothing else.
    let s = Server::start(
        Tokens {
            metrics: Some(ApiKey::new("metrics-token-1")),
            ..tokens()
        },
        None,
    )
    .await;
    let metrics = |token: Option<&'static str>| {
        let mut req = s.http.get(s.url("/metrics"));
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        req.send()
    };
    assert_eq!(metrics(None).await.expect("GET").status().as_u16(), 401);
    let resp = metrics(Some("metrics-token-1")).await.expect("GET");
    assert_eq!(resp.status().as_u16(), 200);
    let resp = s
        .http
        .get(s.url("/v1/rests"))
        .bearer_auth("metrics-token-1")
        .send()
        .await
        .expect("GET");
    assert_eq!(
        resp.status().as_u16(),
        401,
        "the metrics token opens no /v1 route"
    );

    // A metrics token alone guards /metrics too.
    let s = Server::start(
        Tokens {
            metrics: Some(ApiKey::new("metrics-token-1")),
            ..Tokens::default()
        },
        None,
    )
    .await;
    let resp = s.http.get(s.url("/metrics")).send().await.expect("GET");
    assert_eq!(resp.status().as_u16(), 401);
    let resp = s
        .http
        .get(s.url("/metrics"))
        .bearer_auth("metrics-token-1")
        .send()
        .await
        .expect("GET");
    assert_eq!(resp.status().as_u16(), 200);
}
