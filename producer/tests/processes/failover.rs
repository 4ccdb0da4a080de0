//! A Redis Cluster failing over under load (docs/operations.md, "Running on a Redis Cluster"):
//! 500 runs in flight on three worker replicas, and the primary that holds the queue killed
//! (SIGKILL). Its replica takes over, and every run ends, succeeded, within its budget, with one
//! answered call each: none lost, none bought twice.
//!
//! It needs a cluster whose nodes it may kill: `REDIS_URL` naming one (`redis+cluster://…`) and
//! `REDIS_CLUSTER_PORTS`, as `scripts/services.sh`'s `start_redis_cluster` leaves them. The test
//! command runs it last, on the cluster it started; elsewhere it is skipped, and says so.

use crate::common;

use common::fleet::{Fleet, Logging};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

const RUNS: usize = 500;
const PAID: &str = "openai/gpt-4o-mini";
/// A run's calls at most: one route, a chat (docs/design.md §2.1).
const BUDGET: u64 = 6;

/// The cluster's node ports, when the tests run on a cluster this test may break.
fn cluster_ports() -> Option<Vec<u16>> {
    let url = common::skip::redis_url();
    if !url.contains("+cluster://") {
        return None;
    }
    let ports = std::env::var("REDIS_CLUSTER_PORTS").ok()?;
    Some(
        ports
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect(),
    )
}

async fn node(port: u16) -> Option<redis::aio::MultiplexedConnection> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}")).ok()?;
    client.get_multiplexed_async_connection().await.ok()
}

/// A connection to the first node of `ports` that answers.
async fn any_node(ports: &[u16]) -> redis::aio::MultiplexedConnection {
    for &port in ports {
        if let Some(conn) = node(port).await {
            return conn;
        }
    }
    panic!("no node of {ports:?} answers");
}

/// The port of the primary that serves `key`'s slot, read from `CLUSTER NODES`; `None` while
/// none does (its primary is failing and no replica has taken over yet).
async fn primary_of(ports: &[u16], key: &str) -> Option<u16> {
    let mut conn = any_node(ports).await;
    let slot: u16 = redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg(key)
        .query_async(&mut conn)
        .await
        .expect("KEYSLOT");
    let nodes: String = redis::cmd("CLUSTER")
        .arg("NODES")
        .query_async(&mut conn)
        .await
        .expect("CLUSTER NODES");
    for line in nodes.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.len() < 9 || !fields[2].contains("master") || fields[2].contains("fail") {
            continue;
        }
        let serves = fields[8..].iter().any(|range| {
            let (from, to) = range.split_once('-').unwrap_or((range, range));
            matches!((from.parse::<u16>(), to.parse::<u16>()), (Ok(a), Ok(b)) if (a..=b).contains(&slot))
        });
        if serves {
            let addr = fields[1].split('@').next().expect("an address");
            return addr.rsplit(':').next().and_then(|p| p.parse().ok());
        }
    }
    None
}

/// The cluster's state as `port` sees it (`ok` or `fail`).
async fn cluster_state(port: u16) -> String {
    let mut conn = any_node(&[port]).await;
    let info: String = redis::cmd("CLUSTER")
        .arg("INFO")
        .query_async(&mut conn)
        .await
        .unwrap_or_default();
    info.lines()
        .find_map(|l| l.strip_prefix("cluster_state:"))
        .unwrap_or("unknown")
        .trim()
        .to_string()
}

async fn counts(fleet: &Fleet) -> Value {
    fleet.json("/v1/runs?limit=1").await["counts"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_killed_under_load_fails_over_and_every_run_ends_once() {
    let Some(ports) = cluster_ports() else {
        eprintln!(
            "\n*** failover SKIPPED: REDIS_URL is not a cluster with REDIS_CLUSTER_PORTS; \
             scripts/test.sh runs it on one ***\n"
        );
        return;
    };
    let config = sim::SimConfig {
        latency_ms: 300,
        ..sim::SimConfig::default()
    };
    let Some(mut fleet) = Fleet::start("failover", config, 3, Logging::default()).await else {
        return;
    };
    let runs: Vec<Value> = (0..RUNS)
        .map(|i| json!({ "user_id": format!("u{}", i % 20), "input": "hello", "routes": [{ "model": PAID }] }))
        .collect();
    let (status, batch) = fleet
        .call("POST", "/v1/runs:batch", Some(&json!({ "runs": runs })))
        .await;
    assert_eq!(status, 200, "{batch}");
    fleet
        .json_within("/v1/runs?limit=1", Duration::from_secs(60), |r| {
            r["counts"]["succeeded"].as_u64().unwrap_or(0) >= 100
        })
        .await;

    let victim = primary_of(&ports, queue::lane::APALIS_REGISTRY)
        .await
        .expect("the queue's primary");
    let mut conn = any_node(&[victim]).await;
    // A replica still syncing would not stand in for the primary: kill it once one is online.
    let synced = Instant::now() + Duration::from_secs(20);
    loop {
        let replication: String = redis::cmd("INFO")
            .arg("replication")
            .query_async(&mut conn)
            .await
            .expect("INFO");
        if replication.contains("state=online") {
            break;
        }
        assert!(
            Instant::now() < synced,
            "the primary's replica never synced:\n{replication}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let server: String = redis::cmd("INFO")
        .arg("server")
        .query_async(&mut conn)
        .await
        .expect("INFO");
    let pid = server
        .lines()
        .find_map(|l| l.strip_prefix("process_id:"))
        .expect("its process id")
        .trim()
        .to_string();
    let before = counts(&fleet).await["succeeded"].as_u64().unwrap_or(0);
    let killed = Instant::now();
    let status = std::process::Command::new("kill")
        .args(["-9", &pid])
        .status()
        .expect("kill");
    assert!(status.success(), "the primary on port {victim} was killed");

    let survivor = *ports.iter().find(|&&p| p != victim).expect("another node");
    let mut promoted = None;
    let mut resumed = None;
    let deadline = Instant::now() + Duration::from_secs(180);
    let ended = loop {
        let serving = primary_of(&ports, queue::lane::APALIS_REGISTRY).await;
        if promoted.is_none() && serving.is_some_and(|p| p != victim) {
            promoted = Some(killed.elapsed());
        }
        let now = counts(&fleet).await;
        let succeeded = now["succeeded"].as_u64().unwrap_or(0);
        if resumed.is_none() && succeeded > before && promoted.is_some() {
            resumed = Some(killed.elapsed());
        }
        let open: u64 = ["queued", "delayed", "running"]
            .iter()
            .map(|s| now[*s].as_u64().unwrap_or(0))
            .sum();
        if open == 0 && promoted.is_some() {
            break now;
        }
        assert!(
            Instant::now() < deadline,
            "runs still open 180 s after the kill: {now}\n{}",
            fleet.log_of("worker-0")
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let all_done = killed.elapsed();
    eprintln!(
        "failover: the replica took over {:?} after the kill, runs finished again after {:?}, \
         all {RUNS} ended {all_done:?} after it; cluster {}",
        promoted.expect("promoted"),
        resumed,
        cluster_state(survivor).await
    );
    assert_eq!(
        ended["succeeded"], RUNS as u64,
        "every run succeeded: {ended}"
    );

    let answered = fleet
        .sim
        .calls()
        .iter()
        .filter(|c| c.status == 200 && c.variant == "ok")
        .count();
    assert_eq!(
        answered, RUNS,
        "one answered call a run: none lost, none bought twice"
    );
    let mut cursor: Option<String> = None;
    let mut seen = 0;
    loop {
        let path = match &cursor {
            Some(c) => format!("/v1/runs?limit=200&cursor={c}"),
            None => "/v1/runs?limit=200".to_string(),
        };
        let page = fleet.json(&path).await;
        for run in page["runs"].as_array().expect("runs") {
            seen += 1;
            let calls = run["calls"].as_u64().expect("calls");
            assert!((1..=BUDGET).contains(&calls), "within its budget: {run}");
        }
        match page["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_string()),
            None => break,
        }
    }
    assert_eq!(seen, RUNS);
    for n in 0..3 {
        let log = fleet.log_of(&format!("worker-{n}"));
        assert!(
            !log.contains("panicked"),
            "worker-{n} did not panic:\n{log}"
        );
    }
    fleet.stop().await;
}
