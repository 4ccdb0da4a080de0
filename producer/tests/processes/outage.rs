//! Redis down at enqueue: the request fails, and nothing of it is left to run later — no row
//! the reconciler would push once Redis is back. Redis at `maxmemory`: the health check says so.

use crate::common;

use freeway::job::RunRequest;
use freeway::store::{SqlStore, Store};
use queue::Enqueuer;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

/// A redis-server of the test's own (`--save ""`) on `port`, and a new connection to it once it
/// answers.
async fn redis_on(port: u16) -> (std::process::Child, freeway::connect::RedisConnection) {
    let redis = Command::new("redis-server")
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
    (redis, conn.expect("the private Redis answers"))
}

/// [`redis_on`] a free port; `None` (said) on a machine without `redis-server`.
async fn own_redis() -> Option<(u16, std::process::Child, freeway::connect::RedisConnection)> {
    if let Err(e) = Command::new("redis-server").arg("--version").output() {
        common::skip::skipped("redis-server", &format!("it does not start ({e})"));
        return None;
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port");
    let (redis, conn) = redis_on(port).await;
    Some((port, redis, conn))
}

/// The first request after Redis comes back is served: the connection that failed while Redis
/// was away reconnects for it. (It failed, and answered 503, until a later request had
/// reconnected.)
#[tokio::test]
async fn the_first_enqueue_after_redis_returns_reconnects_instead_of_failing() {
    let Some((port, mut redis, conn)) = own_redis().await else {
        return;
    };
    let dir = common::temp_dir("reconnect");
    let store = SqlStore::open(&format!("sqlite://{}", dir.join("freeway.db").display()))
        .await
        .expect("store");
    let enqueuer = Enqueuer::new(conn, "reconnect", Arc::new(store));
    let mut body = common::run_body("u1", "vendor/paid");
    body["on_rest"] = "queue".into();
    let request: RunRequest = serde_json::from_value(body).expect("a request");
    enqueuer.enqueue(request.clone()).await.expect("enqueued");
    let _ = redis.kill();
    let _ = redis.wait();
    let (mut redis, _) = redis_on(port).await;
    let first = enqueuer.enqueue(request).await;
    let _ = redis.kill();
    let _ = redis.wait();
    assert!(
        first.is_ok(),
        "the first enqueue once Redis answers: {first:?}"
    );
}

#[tokio::test]
async fn an_enqueue_during_a_redis_outage_leaves_no_run_behind() {
    let Some((_, mut redis, conn)) = own_redis().await else {
        return;
    };
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
        .unsettled_jobs(i64::MAX as u64, i64::MAX as u64, None, 10)
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

/// A Redis that answers `PING` but refuses writes (`maxmemory` reached, `noeviction`) is not
/// healthy: a producer's `/healthz` says 503 with `"redis":"failed"` while it lasts, and 200 once
/// Redis takes writes again. (It said 200.)
#[tokio::test]
async fn healthz_fails_while_redis_refuses_writes_at_maxmemory() {
    let Some((port, mut redis, conn)) = own_redis().await else {
        return;
    };
    let dir = common::temp_dir("maxmem");
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_producer"));
    cmd.args(["serve", "--addr", "127.0.0.1:0"])
        .env("REDIS_URL", format!("redis://127.0.0.1:{port}"))
        .env(
            "DATABASE_URL",
            format!("sqlite://{}", dir.join("freeway.db").display()),
        )
        .env("FREEWAY_NAMESPACE", "maxmem")
        .env_remove("FREEWAY_API_TOKEN")
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let (_producer, base) = common::listening(cmd).await;
    let healthz = || async {
        let resp = reqwest::get(format!("{base}/healthz"))
            .await
            .expect("answered");
        let status = resp.status().as_u16();
        (status, common::json_of(resp).await)
    };
    assert_eq!(healthz().await.0, 200);
    let set = |name: &'static str, value: &'static str| {
        let mut conn = conn.clone();
        async move {
            let _: () = redis::cmd("CONFIG")
                .arg("SET")
                .arg(name)
                .arg(value)
                .query_async(&mut conn)
                .await
                .expect("CONFIG SET");
        }
    };
    set("maxmemory-policy", "noeviction").await;
    set("maxmemory", "1").await;
    let (status, body) = healthz().await;
    assert_eq!((status, &body["redis"]), (503, &"failed".into()), "{body}");
    let pong: String = redis::cmd("PING")
        .query_async(&mut conn.clone())
        .await
        .expect("PING still answers");
    assert_eq!(pong, "PONG", "only writes are refused");
    set("maxmemory", "0").await;
    assert_eq!(healthz().await.0, 200, "healthy again");
    let _ = redis.kill();
    let _ = redis.wait();
}
