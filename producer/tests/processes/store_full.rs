//! A store whose disk fills up, then has room again: requests fail with 503 and `/healthz` says
//! the store cannot write while the disk is full, and both recover by themselves once there is
//! room, without a restart (a connection left inside a failed transaction is not reused).
//!
//! The disk fills for real: the test limits the file size of `producer serve` (`prlimit --pid
//! --fsize`, as the soft limit) to one byte, so SQLite's next write in it fails as on a full disk
//! (SQLITE_FULL; the producer handles SIGXFSZ); lifting the limit gives the room back. Only that
//! process is limited, never the test binary, whose other tests write files all along.

use crate::common;

use common::fleet::{Fleet, Logging};
use common::run_body;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_is_503_and_unhealthy_and_the_store_recovers_once_there_is_room() {
    let Some(fleet) = Fleet::start(
        "storefull",
        sim::SimConfig::default(),
        0,
        Logging::default(),
    )
    .await
    else {
        return;
    };
    let body = run_body("u1", "vendor/paid");
    assert_eq!(fleet.call("POST", "/v1/runs", Some(&body)).await.0, 202);
    let (status, health) = fleet.call("GET", "/healthz", None).await;
    assert_eq!(status, 200, "{health}");

    // Not one more byte anywhere: SQLite may restart its WAL from the start, below any limit
    // that only stops it growing.
    fleet.limit_file_size("producer", "1:unlimited");
    let mut refused = None;
    for _ in 0..20 {
        let (status, err) = fleet.call("POST", "/v1/runs", Some(&body)).await;
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
    let (status, health) = fleet.call("GET", "/healthz", None).await;
    assert_eq!(
        (status, &health["store"]),
        (503, &serde_json::json!("failed")),
        "{health}"
    );

    fleet.limit_file_size("producer", "unlimited:unlimited");
    let (status, health) = fleet.call("GET", "/healthz", None).await;
    assert_eq!(status, 200, "writable again without a restart: {health}");
    for _ in 0..5 {
        let (status, reply) = fleet.call("POST", "/v1/runs", Some(&body)).await;
        assert_eq!(status, 202, "{reply}");
    }
}
