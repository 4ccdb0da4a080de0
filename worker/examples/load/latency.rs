//! One replica holding many runs at once, and one replica over many runs: the shapes a slow
//! provider and a long-lived process give (docs/operations.md).
//!
//! - `latency`: N streamed runs on a simulator that answers after L ms, one replica at
//!   concurrency C. A replica that keeps its slots full does C / L runs a second; one that moves
//!   runs in waves shows it as take → attempt time (a run taken and not started) and as fewer
//!   runs in flight than slots. Reports the in-flight peak, runs/s against C / L, the worker's
//!   peak RSS and take → attempt percentiles from the store.
//! - `soak`: N runs at zero latency through one replica in rounds of 10,000, its RSS after each
//!   round: a replica's memory must level off, not grow with the runs it has done. What a round
//!   leaves behind is read at rest: the lowest RSS while the replica idles for [`AT_REST`]
//!   after the round drained (at the instant it drains, the allocator still holds what the last
//!   runs freed, a few MB more or less from one round to the next). The round's peak is
//!   reported beside it.

use crate::args::{Args, BoxError};
use crate::cluster::{Cluster, Sim, with_cluster};
use crate::measure::{Snapshot, quantile, thousands};
use crate::workload::request;
use freeway::job::RunJob;
use freeway::store::Store;
use std::path::Path;
use std::time::{Duration, Instant};

/// How often the in-flight count and the RSS are read.
const SAMPLE_EVERY: Duration = Duration::from_millis(100);
/// How often the in-flight count is shown over the run.
const TIMELINE_EVERY: Duration = Duration::from_millis(500);
/// The soak's round: RSS is read after each.
const ROUND: u64 = 10_000;
/// How long the soak watches an idle replica after each round for its RSS at rest.
const AT_REST: Duration = Duration::from_secs(2);
/// Runs read back from the store for the take → attempt times.
const SAMPLE: usize = 1_000;

pub(crate) async fn latency(args: &Args, worker: &Path) -> Result<(), BoxError> {
    let sim = Sim::start(sim::SimConfig {
        latency_ms: args.latency_ms,
        ..Default::default()
    })?;
    with_cluster(sim, args, "lat", async |sim, cluster| {
        let (n, c) = (args.runs, u64::from(args.concurrency));
        println!(
            "latency: {n} streamed runs, sim latency {} ms, {} replica(s) × concurrency {c}, {}",
            args.latency_ms,
            args.replicas,
            if args.http2 { "HTTP/2" } else { "HTTP/1.1" }
        );
        let jobs = push(cluster, 0..n).await?;
        let mut conn = cluster.conn.clone();
        let before = Snapshot::take(&mut conn, &[], sim.tid).await?;
        cluster.spawn_fleet(worker, args, sim, &[])?;
        let pids = cluster.worker_pids();
        let started = Instant::now();
        let (mut in_flight_peak, mut rss_peak_kb) = (0u64, 0u64);
        let mut timeline = Vec::new();
        loop {
            let (depths, replicas) = cluster.queue.snapshot().await?;
            let in_flight = replicas.iter().map(|r| r.running).sum();
            in_flight_peak = in_flight_peak.max(in_flight);
            timeline.push(in_flight);
            rss_peak_kb = rss_peak_kb.max(pids.iter().filter_map(|p| rss_kb(*p)).sum());
            if depths.done + depths.dead >= n {
                break;
            }
            cluster.check_workers()?;
            if started.elapsed().as_secs() > args.timeout_s {
                return Err(
                    format!("only {} of {n} finished (depths {depths:?})", depths.done).into(),
                );
            }
            tokio::time::sleep(SAMPLE_EVERY).await;
        }
        let total_s = started.elapsed().as_secs_f64();
        let after = Snapshot::take(&mut conn, &pids, sim.tid).await?;
        let slots = u64::from(args.replicas) * c;
        let ideal = slots as f64 * 1000.0 / args.latency_ms.max(1) as f64;
        let rate = n as f64 / total_s;
        println!(
            "  drain            {n} runs in {total_s:.2} s = {} runs/s; the slots allow {} \
             ({:.0}%)",
            thousands(rate),
            thousands(ideal),
            100.0 * rate / ideal
        );
        println!(
            "  in flight        peak {in_flight_peak} of {slots} slots (claimed jobs, apalis's \
             in-flight sets); worker RSS peak {:.0} MB",
            rss_peak_kb as f64 / 1024.0
        );
        // A replica that moves runs in waves shows them here: slots empty between the waves.
        let every = (TIMELINE_EVERY.as_millis() / SAMPLE_EVERY.as_millis()) as usize;
        let shown: Vec<String> = timeline.iter().step_by(every).map(u64::to_string).collect();
        println!(
            "  in flight / {} ms {}",
            TIMELINE_EVERY.as_millis(),
            shown.join(" ")
        );
        let (mut to_attempt, mut inside) = (vec![], vec![]);
        for job in jobs.iter().step_by((jobs.len() / SAMPLE).max(1)) {
            let Some(rec) = cluster.store.run(&job.run_id).await? else {
                continue;
            };
            // The worker dates the record when it takes the run (nothing was stored at enqueue).
            if let Some(first) = cluster.store.attempts(&job.run_id).await?.first() {
                to_attempt.push(first.t_ms.saturating_sub(rec.created_ms));
            }
            inside.push(rec.updated_ms.saturating_sub(rec.created_ms));
        }
        let ms = |v: Option<u64>| v.map_or("?".into(), |v| format!("{v} ms"));
        println!(
            "  take → attempt   median {}, p90 {}, p99 {}; take → finished median {}, p90 {} \
             ({} sampled runs)",
            ms(quantile(&mut to_attempt, 0.5)),
            ms(quantile(&mut to_attempt, 0.9)),
            ms(quantile(&mut to_attempt, 0.99)),
            ms(quantile(&mut inside, 0.5)),
            ms(quantile(&mut inside, 0.9)),
            inside.len()
        );
        println!("  cpu              {}", after.cpu(&before, total_s));
        println!("  redis            {}", after.redis_per(&before, n, "run"));
        Ok(())
    })
    .await
}

pub(crate) async fn soak(args: &Args, worker: &Path) -> Result<(), BoxError> {
    let sim = Sim::start(sim::SimConfig::default())?;
    with_cluster(sim, args, "soak", async |sim, cluster| {
        let n = args.runs.max(ROUND);
        println!(
            "soak: {n} runs at zero latency through one replica × concurrency {}, in rounds of \
             {ROUND}",
            args.concurrency
        );
        cluster.spawn_workers(worker, 1, args.concurrency, &sim.handle().base_url(), &[])?;
        let pid = cluster.worker_pids()[0];
        let started = Instant::now();
        let mut after_first = None;
        let mut pushed = 0;
        while pushed < n {
            let round = pushed..(pushed + ROUND).min(n);
            pushed = round.end;
            push(cluster, round).await?;
            let mut peak = Memory::default();
            loop {
                peak = peak.max(Memory::of(pid)?);
                let depths = cluster.queue.depths().await?;
                if depths.done + depths.dead >= pushed {
                    break;
                }
                cluster.check_workers()?;
                if started.elapsed().as_secs() > args.timeout_s {
                    return Err(format!("only {} of {pushed} finished", depths.done).into());
                }
                tokio::time::sleep(SAMPLE_EVERY).await;
            }
            let resting = Instant::now();
            let mut rest = Memory::of(pid)?;
            while resting.elapsed() < AT_REST {
                tokio::time::sleep(SAMPLE_EVERY).await;
                rest = rest.min(Memory::of(pid)?);
            }
            let first = *after_first.get_or_insert(rest);
            let change = |now: u64, then: u64| 100.0 * (now as f64 - then as f64) / then as f64;
            println!(
                "  after {:>7} runs  at rest RSS {:.1} MB ({:+.1}% of after the first round), \
                 heap (RssAnon) {:.1} MB ({:+.1}%); the round's peak RSS {:.1} MB; {:.0} s",
                thousands(pushed as f64),
                mb(rest.rss_kb),
                change(rest.rss_kb, first.rss_kb),
                mb(rest.anon_kb),
                change(rest.anon_kb, first.anon_kb),
                mb(peak.rss_kb),
                started.elapsed().as_secs_f64()
            );
        }
        Ok(())
    })
    .await
}

/// Push runs `range` of the scenario's requests at once.
async fn push(cluster: &Cluster, range: std::ops::Range<u64>) -> Result<Vec<RunJob>, BoxError> {
    let now = freeway::clock::epoch_ms();
    let jobs: Vec<RunJob> = range.map(|i| RunJob::new(request(i), now)).collect();
    cluster.queue.push(&jobs).await?;
    Ok(jobs)
}

/// The resident set of `pid`, in KiB (`VmRSS` of /proc/…/status).
fn rss_kb(pid: u32) -> Option<u64> {
    status_kb(pid, "VmRSS")
}

/// A worker's resident set, and the part of it that is its heap (the rest is mapped files, its
/// own code first).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
struct Memory {
    rss_kb: u64,
    anon_kb: u64,
}

impl Memory {
    fn of(pid: u32) -> Result<Memory, BoxError> {
        Ok(Memory {
            rss_kb: rss_kb(pid).ok_or("the worker's RSS cannot be read")?,
            anon_kb: status_kb(pid, "RssAnon").unwrap_or(0),
        })
    }
}

fn mb(kb: u64) -> f64 {
    kb as f64 / 1024.0
}

/// A `… kB` line of /proc/…/status: `VmRSS`, or its parts `RssAnon` and `RssFile`.
fn status_kb(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}
