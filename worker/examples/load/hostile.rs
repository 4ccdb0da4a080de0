//! `--scenario hostile`: what a hostile but ordinary client does to a running fleet, and what it
//! must not get (docs/design.md §4.3 "One key, one run", §3.3 "Rests a stranger cannot inflate"):
//!
//! - one idempotency key sent by 10 requests at once, in three rounds: runs and calls per key;
//! - five identical batches of 50 keyed bodies at once: runs for the 50 keys;
//! - ten retries of one failed run at once: new runs;
//! - 3,000 runs naming made-up models (the simulator has no endpoints for them) from 150 users,
//!   after as many on a configured model: what each leaves in Redis, by kind of key, and the
//!   size of `GET /v1/rests` and the board's overview.
//!
//! Every answer's HTTP status is counted: a 5xx while Redis and the store are healthy is a fault.

use crate::args::{Args, BoxError};
use crate::cluster::{Cluster, Sim, with_cluster};
use crate::serve::{ADMIN_TOKEN, API_TOKEN, Producer};
use freeway::connect::RedisConnection;
use freeway::run::RunStatus;
use freeway::store::Store;
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

const PAID: &str = "openai/gpt-4o-mini";
/// Runs naming made-up models, and the users they come from.
const MADE_UP: usize = 3_000;
const STRANGERS: usize = 150;
/// The workers' `FREEWAY_EVENTS_KEEP_S` here (an hour by default): short, so the scenario can
/// see what runs leave once their streams have lapsed.
const EVENTS_KEEP_S: u64 = 5;

/// The API as a web app's backend calls it, every answer's status counted.
struct Client {
    http: reqwest::Client,
    base: String,
    statuses: Mutex<BTreeMap<u16, u64>>,
}

impl Client {
    async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&Value>,
    ) -> (usize, Value) {
        let mut request = self
            .http
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(if path.contains("/board/") {
                ADMIN_TOKEN
            } else {
                API_TOKEN
            });
        if let Some(body) = body {
            request = request
                .header("content-type", "application/json")
                .body(body.to_string());
        }
        let (status, text) = match request.send().await {
            Ok(resp) => (
                resp.status().as_u16(),
                resp.text().await.unwrap_or_default(),
            ),
            Err(_) => (0, String::new()),
        };
        if let Ok(mut statuses) = self.statuses.lock() {
            *statuses.entry(status).or_default() += 1;
        }
        (
            text.len(),
            serde_json::from_str(&text).unwrap_or(Value::Null),
        )
    }

    async fn post(&self, path: &str, body: &Value) -> Value {
        self.send(reqwest::Method::POST, path, Some(body)).await.1
    }

    async fn get(&self, path: &str) -> (usize, Value) {
        self.send(reqwest::Method::GET, path, None).await
    }
}

fn body(user: &str, model: &str, key: Option<String>) -> Value {
    let mut body = json!({ "user_id": user, "input": "hello", "routes": [{ "model": model }] });
    if let Some(key) = key {
        body["idempotency_key"] = json!(key);
    }
    body
}

pub(crate) async fn run(args: &Args, worker: &Path) -> Result<(), BoxError> {
    let sim = Sim::start(sim::SimConfig::default())?;
    with_cluster(sim, args, "hostile", async |sim, cluster| {
        println!(
            "hostile: racing keys, batches and retries, then {MADE_UP} made-up models, against \
             {} worker processes × concurrency {} and one producer",
            args.replicas, args.concurrency
        );
        let keep = EVENTS_KEEP_S.to_string();
        cluster.spawn_fleet(worker, args, sim, &[("FREEWAY_EVENTS_KEEP_S", &keep)])?;
        let producer = Producer::start(worker, args, cluster).await?;
        let client = Client {
            http: producer.http.clone(),
            base: producer.base.clone(),
            statuses: Mutex::default(),
        };
        let mut keys = 0;
        for round in 0..3 {
            let key = Some(format!("double-click-{round}"));
            let body = body("racer", PAID, key);
            let answers =
                futures_util::future::join_all((0..10).map(|_| client.post("/v1/runs", &body)))
                    .await;
            println!(
                "  one key, 10 requests at once: {} runs",
                distinct_runs(&answers)
            );
            keys += 1;
        }
        let bodies: Vec<Value> = (0..50)
            .map(|i| body(&format!("b{}", i % 5), PAID, Some(format!("batch-{i}"))))
            .collect();
        let batch = json!({ "runs": bodies });
        let answers =
            futures_util::future::join_all((0..5).map(|_| client.post("/v1/runs:batch", &batch)))
                .await;
        let per_key: usize = (0..50)
            .map(|i| {
                let results: Vec<Value> = answers.iter().map(|a| a["results"][i].clone()).collect();
                distinct_runs(&results)
            })
            .sum();
        println!("  five batches of 50 keyed bodies at once: {per_key} runs for 50 keys");
        keys += 50;
        settle(cluster).await?;
        println!(
            "  provider calls for the {keys} keys: {}",
            sim.handle().calls().len()
        );

        // Two 500s: the run fails (a one-route chain retries once) and rests nothing, so its
        // retries are not refused.
        let mut doomed = sim::FaultSpec::new(sim::FaultKind::Server500);
        doomed.model = Some("vendor/doomed".into());
        doomed.count = 2;
        sim.handle().inject(doomed);
        let failed = client
            .post("/v1/runs", &body("retrier", "vendor/doomed", None))
            .await;
        let failed = failed["run_id"].as_str().unwrap_or_default().to_string();
        settle(cluster).await?;
        let path = format!("/v1/runs/{failed}/retry?user_id=retrier");
        let empty = json!({});
        let answers =
            futures_util::future::join_all((0..10).map(|_| client.post(&path, &empty))).await;
        println!(
            "  ten retries of one run at once: {} new runs",
            distinct_runs(&answers)
        );
        settle(cluster).await?;

        // The same number of runs on a configured model first: what any runs leave, for a
        // while (their event streams, apalis's records until the vacuum), against which the
        // made-up models' own cost shows.
        let control = MemoryPhase::measure(cluster, async |cluster| {
            send_runs(&client, |_| PAID.to_string()).await;
            settle(cluster).await
        })
        .await?;
        control.report(&format!("{MADE_UP} runs on a configured model"));
        let mut gone = sim::FaultSpec::new(sim::FaultKind::NoEndpoints404);
        gone.count = u32::MAX;
        sim.handle().inject(gone);
        let made_up = MemoryPhase::measure(cluster, async |cluster| {
            send_runs(&client, |n| format!("made-up/model-{n}")).await;
            settle(cluster).await
        })
        .await?;
        made_up.report(&format!("{MADE_UP} runs on made-up models"));
        let (rests_bytes, rests) = client.get("/v1/rests").await;
        let (overview_bytes, _) = client.get("/v1/board/overview").await;
        let listed = rests["total"]
            .as_u64()
            .unwrap_or_else(|| rests["rests"].as_array().map_or(0, |r| r.len() as u64));
        println!(
            "  then: {listed} rests; GET /v1/rests {:.1} KB, the board's overview {:.1} KB",
            rests_bytes as f64 / 1024.0,
            overview_bytes as f64 / 1024.0,
        );
        let statuses = client
            .statuses
            .lock()
            .map(|s| s.clone())
            .unwrap_or_default();
        println!("  answers by status: {statuses:?}");
        Ok(())
    })
    .await
}

/// [`MADE_UP`] runs, from [`STRANGERS`] users, the `n`-th on `model(n)`, 32 requests at a time.
async fn send_runs(client: &Client, model: impl Fn(usize) -> String) {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let sender = async || loop {
        let n = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if n >= MADE_UP {
            return;
        }
        let body = body(&format!("u{}", n % STRANGERS), &model(n), None);
        client.post("/v1/runs", &body).await;
    };
    futures_util::future::join_all((0..32).map(|_| sender())).await;
}

/// What a phase cost Redis: `used_memory` before, right after its runs ended, and once what
/// runs keep for a while has gone — their event streams ([`EVENTS_KEEP_S`] here) and apalis's
/// records of their deliveries (vacuumed as a replica does once they are old enough) — with the
/// namespace's keys by kind that grew, at that point.
struct MemoryPhase {
    wall_s: f64,
    used: u64,
    ended: u64,
    left: u64,
    kinds: Vec<(String, i64, i64)>,
}

impl MemoryPhase {
    async fn measure(
        cluster: &mut Cluster,
        phase: impl AsyncFnOnce(&mut Cluster) -> Result<(), BoxError>,
    ) -> Result<MemoryPhase, BoxError> {
        let (conn, ns) = (cluster.conn.clone(), cluster.namespace().to_string());
        let (conn, ns) = (&conn, ns.as_str());
        let (used, kinds) = (used_memory(conn).await?, memory_by_kind(conn, ns).await?);
        let started = Instant::now();
        phase(cluster).await?;
        let wall_s = started.elapsed().as_secs_f64();
        let ended = used_memory(conn).await?;
        lapse(cluster).await?;
        let (left, mut kinds_after) = (used_memory(conn).await?, memory_by_kind(conn, ns).await?);
        for (kind, (keys, bytes)) in kinds {
            let after = kinds_after.entry(kind).or_default();
            after.0 -= keys;
            after.1 -= bytes;
        }
        let mut kinds: Vec<(String, i64, i64)> = kinds_after
            .into_iter()
            .filter(|(_, (keys, bytes))| *keys != 0 || *bytes != 0)
            .map(|(kind, (keys, bytes))| (kind, keys, bytes))
            .collect();
        kinds.sort_by_key(|(_, _, bytes)| std::cmp::Reverse(*bytes));
        Ok(MemoryPhase {
            wall_s,
            used,
            ended,
            left,
            kinds,
        })
    }

    fn report(&self, what: &str) {
        let mb = |bytes: u64| bytes as f64 / 1e6;
        println!(
            "  {what} in {:.1} s: Redis used_memory {:.1} MB → {:.1} as they end (+{:.2}) → \
             {:.1} once their events and records have gone: {:+.2} MB from where it began",
            self.wall_s,
            mb(self.used),
            mb(self.ended),
            mb(self.ended) - mb(self.used),
            mb(self.left),
            mb(self.left) - mb(self.used),
        );
        for (kind, keys, bytes) in self.kinds.iter().take(6) {
            println!(
                "    {:>+9.1} KB {keys:>+6} keys {kind}",
                *bytes as f64 / 1024.0
            );
        }
    }
}

/// Wait for the runs' event streams to lapse, then vacuum apalis's records of their
/// deliveries as a replica does once [`queue::schedule::KEEP_DELIVERED`] has passed.
async fn lapse(cluster: &Cluster) -> Result<(), BoxError> {
    let deadline = Instant::now() + Duration::from_secs(EVENTS_KEEP_S + 30);
    let streams = format!("*{}*:events", cluster.namespace());
    while !keys(&cluster.conn, &streams).await?.is_empty() {
        if Instant::now() > deadline {
            return Err("the runs' event streams outlived their keep".into());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let later = freeway::clock::epoch_ms() + queue::schedule::KEEP_DELIVERED.as_millis() as u64;
    cluster.queue.vacuum(later, 1_000_000).await?;
    Ok(())
}

/// The distinct run ids among answers (a `202`'s, or a batch result's).
fn distinct_runs(answers: &[Value]) -> usize {
    answers
        .iter()
        .filter_map(|a| a["run_id"].as_str())
        .collect::<BTreeSet<_>>()
        .len()
}

/// Wait until no run of the scenario's store is waiting or running.
async fn settle(cluster: &mut Cluster) -> Result<(), BoxError> {
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let counts = cluster.store.count_by_status().await?;
        let open = counts.iter().any(|c| {
            c.runs > 0
                && matches!(
                    c.status,
                    RunStatus::Queued | RunStatus::Delayed | RunStatus::Running
                )
        });
        if !open {
            return Ok(());
        }
        cluster.check_workers()?;
        if Instant::now() > deadline {
            return Err(format!("runs still open after 300 s: {counts:?}").into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Redis's `used_memory`, in bytes.
async fn used_memory(conn: &RedisConnection) -> Result<u64, BoxError> {
    let mut conn = conn.clone();
    let info: String = redis::cmd("INFO")
        .arg("memory")
        .query_async(&mut conn)
        .await?;
    info.lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| "INFO memory has no used_memory".into())
}

/// The keys matching `pattern`.
async fn keys(conn: &RedisConnection, pattern: &str) -> Result<Vec<String>, BoxError> {
    let mut conn = conn.clone();
    let (mut all, mut cursor) = (Vec::new(), 0u64);
    loop {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(1000)
            .query_async(&mut conn)
            .await?;
        all.extend(keys);
        cursor = next;
        if cursor == 0 {
            return Ok(all);
        }
    }
}

/// The namespace's keys by kind (ids and numbers as `*`): how many, and their `MEMORY USAGE`.
async fn memory_by_kind(
    conn: &RedisConnection,
    ns: &str,
) -> Result<BTreeMap<String, (i64, i64)>, BoxError> {
    let mut kinds: BTreeMap<String, (i64, i64)> = BTreeMap::new();
    let mut c = conn.clone();
    for key in keys(conn, &format!("*{ns}*")).await? {
        let bytes: Option<i64> = redis::cmd("MEMORY")
            .arg("USAGE")
            .arg(&key)
            .query_async(&mut c)
            .await?;
        let kind = key
            .replace(ns, "ns")
            .split(':')
            .map(|part| match part.chars().any(|c| c.is_ascii_digit()) {
                true => "*",
                false => part,
            })
            .collect::<Vec<_>>()
            .join(":");
        let entry = kinds.entry(kind).or_default();
        entry.0 += 1;
        entry.1 += bytes.unwrap_or(0);
    }
    Ok(kinds)
}
