//! A store whose disk fills up, then has room again: requests fail with 503 and `/healthz` says
//! the store cannot write while the disk is full, and both recover by themselves once there is
//! room, without a restart (a connection left inside a failed transaction is not reused).
//!
//! The disk fills for real: this test binary limits its own file size (`prlimit --fsize`, as
//! the soft limit, which any process may set and lift) to one byte, so SQLite's next write fails as
//! on a full disk (SQLITE_FULL); lifting the limit gives the room back. It is its own binary
//! because the limit applies to the whole process.

use crate::common;

use common::{Server, run_body};

fn limit_file_size(limit: &str) {
    let status = std::process::Command::new("prlimit")
        .args([
            "--pid",
            &std::process::id().to_string(),
            &format!("--fsize={limit}"),
        ])
        .status()
        .expect("prlimit (util-linux) on PATH");
    assert!(status.success(), "prlimit --fsize={limit}");
}

#[tokio::test]
async fn a_full_disk_is_503_and_unhealthy_and_the_store_recovers_once_there_is_room() {
    // Past the limit a write fails (EFBIG) instead of the process being killed by SIGXFSZ.
    let _xfsz = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::from_raw(25))
        .expect("a SIGXFSZ handler");
    let Some(s) = Server::open().await else {
        return;
    };
    let body = run_body("u1", "vendor/paid");
    assert_eq!(s.post_run(&body).await.0, 202);
    let (status, health) = s.get_json("/healthz").await;
    assert_eq!(status, 200, "{health}");

    // Not one more byte anywhere: SQLite may restart its WAL from the start, below any limit
    // that only stops it growing.
    limit_file_size("1:unlimited");
    let mut refused = None;
    for _ in 0..20 {
        let (status, err) = s.post_run(&body).await;
        if status != 202 {
            refused = Some((status, err));
            break;
        }
    }
    let (status, err) = refused.expect("a write past the end of a full disk fails");
    assert_eq!(
        (status, err["error"]["code"].as_str()),
        (503, Some("unavailable")),
        "{err}"
    );
    let (status, health) = s.get_json("/healthz").await;
    assert_eq!(
        (status, &health["store"]),
        (503, &serde_json::json!("failed")),
        "{health}"
    );

    limit_file_size("unlimited:unlimited");
    let (status, health) = s.get_json("/healthz").await;
    assert_eq!(status, 200, "writable again without a restart: {health}");
    for _ in 0..5 {
        let (status, reply) = s.post_run(&body).await;
        assert_eq!(status, 202, "{reply}");
    }
}
