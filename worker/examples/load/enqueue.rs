//! The enqueue path under load: `POST /v1/runs` one run a request and `POST /v1/runs:batch`
//! (docs/api.md) against a real `producer serve`, while worker replicas drain what arrives, so
//! the producer shares the machine with the work it feeds, as it does in production.

use crate::args::{Args, BoxError};
use crate::cluster::{Sim, with_cluster};
use crate::measure::{cpu_s, thousands};
use crate::serve::{API_TOKEN, Producer};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
/// Clients posting single runs at once.
const CLIENTS: u64 = 256;
/// Bodies a batch request carries, and batch requests in flight at once.
const BATCH: u64 = 500;
const BATCHES_AT_ONCE: u64 = 4;

pub(crate) async fn run(args: &Args, worker: &Path) -> Result<(), BoxError> {
    let sim = Sim::start(sim::SimConfig::default())?;
    with_cluster(sim, args, "enq", async |sim, cluster| {
        let n = args.runs;
        println!(
            "enqueue: {n} runs by POST /v1/runs ({CLIENTS} clients), then {n} by POST \
             /v1/runs:batch ({BATCH} a request, {BATCHES_AT_ONCE} at once), while {} worker \
             processes × concurrency {} drain them",
            args.replicas, args.concurrency
        );
        cluster.spawn_fleet(worker, args, sim, &[])?;
        let producer = Producer::start(worker, args, cluster).await?;
        let (http, base, pid) = (&producer.http, producer.base.clone(), producer.pid());
        let single = timed(pid, || single(http, &base, n)).await?;
        single.report("POST /v1/runs", n);
        let batch = timed(pid, || batches(http, &base, n)).await?;
        batch.report("POST /v1/runs:batch", n);
        let started = Instant::now();
        loop {
            let d = cluster.queue.depths().await?;
            if d.done + d.dead >= 2 * n {
                break;
            }
            cluster.check_workers()?;
            if started.elapsed().as_secs() > args.timeout_s {
                return Err(format!("only {} of {} runs finished", d.done, 2 * n).into());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        println!(
            "  drained          all {} runs {:.2} s after the last enqueue",
            2 * n,
            started.elapsed().as_secs_f64()
        );
        Ok(())
    })
    .await
}

/// How an enqueue phase went.
struct Phase {
    wall_s: f64,
    producer_cpu_s: f64,
}

impl Phase {
    fn report(&self, what: &str, n: u64) {
        println!(
            "  {what:<20} {n} runs in {:.2} s = {} runs/s; producer CPU {:.3} ms a run",
            self.wall_s,
            thousands(n as f64 / self.wall_s),
            1000.0 * self.producer_cpu_s / n as f64
        );
    }
}

async fn timed<F: Future<Output = Result<(), BoxError>>>(
    pid: u32,
    phase: impl FnOnce() -> F,
) -> Result<Phase, BoxError> {
    let stat = format!("/proc/{pid}/stat");
    let cpu_before = cpu_s(&stat).unwrap_or(0.0);
    let started = Instant::now();
    phase().await?;
    Ok(Phase {
        wall_s: started.elapsed().as_secs_f64(),
        producer_cpu_s: cpu_s(&stat).unwrap_or(0.0) - cpu_before,
    })
}

/// A run body of the scenario's workload: one paid model, one of a hundred users.
fn body(i: u64) -> serde_json::Value {
    serde_json::json!({
        "user_id": format!("user-{}", i % 100),
        "input": "Say something about load testing, please.",
        "routes": [{ "model": "openai/gpt-4o-mini" }],
    })
}

async fn single(http: &reqwest::Client, base: &str, n: u64) -> Result<(), BoxError> {
    let next = Arc::new(AtomicU64::new(0));
    let clients: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let (http, url, next) = (http.clone(), format!("{base}/v1/runs"), next.clone());
            tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= n {
                        return Ok::<(), String>(());
                    }
                    let resp = http
                        .post(&url)
                        .bearer_auth(API_TOKEN)
                        .header("content-type", "application/json")
                        .body(body(i).to_string())
                        .send()
                        .await
                        .map_err(|e| e.to_string())?;
                    if resp.status().as_u16() != 202 {
                        return Err(format!("POST /v1/runs answered {}", resp.status()));
                    }
                }
            })
        })
        .collect();
    for c in clients {
        c.await??;
    }
    Ok(())
}

async fn batches(http: &reqwest::Client, base: &str, n: u64) -> Result<(), BoxError> {
    let next = Arc::new(AtomicU64::new(0));
    let senders: Vec<_> = (0..BATCHES_AT_ONCE)
        .map(|_| {
            let (http, url, next) = (http.clone(), format!("{base}/v1/runs:batch"), next.clone());
            tokio::spawn(async move {
                loop {
                    let from = next.fetch_add(BATCH, Ordering::Relaxed);
                    if from >= n {
                        return Ok::<(), String>(());
                    }
                    let runs: Vec<_> = (from..(from + BATCH).min(n)).map(body).collect();
                    let resp = http
                        .post(&url)
                        .bearer_auth(API_TOKEN)
                        .header("content-type", "application/json")
                        .body(serde_json::json!({ "runs": runs }).to_string())
                        .send()
                        .await
                        .map_err(|e| e.to_string())?;
                    let bytes = resp.bytes().await.map_err(|e| e.to_string())?;
                    let answer: serde_json::Value =
                        serde_json::from_slice(&bytes).map_err(|e| e.to_string())?;
                    let results = answer["results"].as_array().cloned().unwrap_or_default();
                    if results.len() != runs.len() || results.iter().any(|r| r["status"] != 202) {
                        return Err(format!("a batch was not all enqueued: {answer}"));
                    }
                }
            })
        })
        .collect();
    for s in senders {
        s.await??;
    }
    Ok(())
}
