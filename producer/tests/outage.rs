//! Redis down at enqueue: the request fails, and nothing of it is left to run later — no row
//! the reconciler would push once Redis is back.

mod common;

use freeway::job::RunRequest;
use freeway::store::{SqlStore, Store};
use queue::Enqueuer;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

#[tokio::test]
async fn an_enqueue_during_a_redis_outage_leaves_no_run_behind() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port");
    let mut redis = Command::new("redis-server")
        .args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
        ])
        .stdout(Stdio::null())
        .spawn()
        .expect("redis-server on PATH");
    let url = format!("redis://127.0.0.1:{port}");
    let mut conn = None;
    for _ in 0..200 {
        if let Ok(c) = freeway::connect::redis(&url).await {
            conn = Some(c);
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let conn = conn.expect("the private Redis answers");
    let dir = common::temp_dir("outage");
    let store = SqlStore::open(&format!("sqlite://{}", dir.join("freeway.db").display()))
        .await
        .expect("store");
    let enqueuer = Enqueuer::new(conn, "outage", Arc::new(store.clone()));
    let _ = redis.kill();
    let _ = redis.wait();

    // `on_rest: queue` skips the refusal check, the first thing that would meet the outage.
    let mut body = common::run_body("u1", "vendor/paid");
    body["on_rest"] = "queue".into();
    let request: RunRequest = serde_json::from_value(body).expect("a request");
    let result = enqueuer.enqueue(request).await;
    assert!(result.is_err(), "{result:?}");
    let stale = store
        .unsettled_jobs(i64::MAX as u64, 10)
        .await
        .expect("the store reads");
    assert!(stale.is_empty(), "a run was left to run later: {stale:?}");
    assert!(
        store
            .list_runs(&Default::default(), None, 10)
            .await
            .expect("reads")
            .runs
            .is_empty(),
        "a run row was left behind"
    );
}
