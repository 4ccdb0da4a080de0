//! The job board: its page under a strict content policy, and the overview, run list and run
//! detail it reads, behind the API token.

use crate::common::{Server, json_of, run_body};
use crate::{code, rest_pool, tokens};
use freeway::events::Event;
use freeway::store::Store;
use serde_json::{Value, json};

#[tokio::test]
async fn the_board_page_is_served_with_a_strict_policy_and_its_data_needs_the_token() {
    let Some(s) = Server::start(tokens(), None).await else {
        return;
    };
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

    for path in ["/v1/board/overview", "/v1/runs", "/v1/board/runs/run_x"] {
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
    let Some(s) = Server::open().await else {
        return;
    };
    s.post_run(&run_body("u1", "vendor/m")).await;
    rest_pool(&s, 30_000).await;
    let queue = s.enqueuer.queue().name().to_string();
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
    let rests = o["rests"]["rests"].as_array().expect("rests");
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
    let Some(s) = Server::open().await else {
        return;
    };
    let mut ids = Vec::new();
    for user in ["u1", "u2", "u3"] {
        let (_, body) = s.post_run(&run_body(user, "vendor/m:free")).await;
        ids.push(body["run_id"].as_str().expect("id").to_string());
        tokio::time::sleep(std::time::Duration::from_millis(3)).await;
    }
    let (status, list) = s.get_json("/v1/runs?limit=2").await;
    assert_eq!(status, 200);
    let runs = list["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), 2);
    assert_eq!(runs[0]["run_id"], ids[2].as_str());
    assert_eq!(runs[1]["run_id"], ids[1].as_str());
    assert_eq!(runs[0]["status"], "queued");
    assert_eq!(runs[0]["routes"], json!(["vendor/m:free"]));
    assert_eq!(runs[0]["calls"], 0);
    let (status, _) = s.get_json("/v1/runs?limit=x").await;
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
            cost_usd: 0.0,
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
async fn the_runs_list_pages_by_cursor_counts_by_status_and_refuses_bad_queries() {
    let Some(s) = Server::open().await else {
        return;
    };
    let mut ids = Vec::new();
    for n in 0..5 {
        let (_, body) = s
            .post_run(&run_body(&format!("u{n}"), "vendor/m:free"))
            .await;
        ids.push(body["run_id"].as_str().expect("id").to_string());
        tokio::time::sleep(std::time::Duration::from_millis(3)).await;
    }
    ids.reverse();
    let mut seen = Vec::new();
    let mut path = "/v1/runs?limit=2".to_string();
    loop {
        let (status, page) = s.get_json(&path).await;
        assert_eq!(status, 200, "{page}");
        assert_eq!(page["counts"]["queued"], 5, "{page}");
        assert_eq!(
            page["counts"]["failed"], 0,
            "every status is counted: {page}"
        );
        for run in page["runs"].as_array().expect("runs") {
            seen.push(run["run_id"].as_str().expect("id").to_string());
        }
        match page["next_cursor"].as_str() {
            Some(cursor) => path = format!("/v1/runs?limit=2&cursor={cursor}"),
            None => break,
        }
    }
    assert_eq!(seen, ids, "every run once, newest first");
    let (_, failed) = s.get_json("/v1/runs?status=failed").await;
    assert_eq!(failed["runs"], json!([]));
    assert_eq!(
        failed["counts"]["queued"], 5,
        "tabs count beside the filter"
    );
    let prefix = &ids[2][..ids[2].len() - 2];
    let (_, found) = s.get_json(&format!("/v1/runs?q={prefix}")).await;
    assert_eq!(found["runs"].as_array().map(Vec::len), Some(1), "{found}");
    assert_eq!(found["runs"][0]["run_id"], ids[2].as_str(), "{found}");
    for bad in [
        "status=lost",
        "code=nonsense",
        "cursor=123",
        "cursor=abc.run",
        "limit=0",
        "limit=201",
        "user_id=a%20b",
        "offset=10",
    ] {
        let (status, err) = s.get_json(&format!("/v1/runs?{bad}")).await;
        assert_eq!(
            (status, code(&err)),
            (400, "invalid_request"),
            "{bad}: {err}"
        );
    }
}
