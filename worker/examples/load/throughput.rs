//! The throughput scenario: N runs through enqueue → worker → sim → store, against N bare
//! apalis jobs on the same Redis with the same queue settings (docs/operations.md): no-op
//! jobs, and jobs that make the one provider call a run makes (to a simulator of their own) and
//! nothing else, the floor of any job that calls a model.
//!
//! Both are pushed while nothing consumes them, so the drain starts from a backlog of N: the
//! case where a fetch that costs O(backlog) (apalis's lease scan, off in freeway's queue
//! settings) would show, as a first half slower than the second.

use crate::args::{Args, BoxError};
use crate::cluster::{Cluster, Sim, delete_namespace, fresh_namespace, with_cluster};
use crate::measure::{Snapshot, quantile, thousands};
use crate::workload::{PAID, request};
use apalis::layers::limit::GlobalConcurrencyLimitLayer;
use apalis::prelude::*;
use freeway::chat::Message;
use freeway::job::RunJob;
use freeway::provider::{ApiKey, ChatProvider, ChatRequest, HttpProvider, Target, Timeouts};
use freeway::run::RunStatus;
use freeway::store::Store;
use queue::Queue;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The bare workers' poll interval, the worker's (which polls with a strategy of its own, see
/// worker/src/consume.rs; with a backlog both fetch again as soon as a batch is taken).
const POLL: Duration = Duration::from_millis(50);
/// How often completion is read: bare apalis drains 5,000 jobs in a few tenths of a second, so
/// the worker's 50 ms would blur its rate; a read is a few Redis commands.
const READ_EVERY: Duration = Duration::from_millis(10);
/// The figure for the pipeline: bare apalis no-op jobs on this kind of machine with
/// leases on (docs/operations.md).
const TARGET: f64 = 5_000.0;
/// Runs read back from the store to check them and see where their time went.
const SAMPLE: usize = 200;

pub(crate) async fn run(args: &Args, worker: &Path) -> Result<(), BoxError> {
    let sim = Sim::start(sim::SimConfig {
        latency_ms: 0,
        ..Default::default()
    })?;
    let pipeline = with_cluster(sim, args, "tp", async |sim, cluster| {
        pipeline(args, worker, sim, cluster).await
    })
    .await?;
    crate::store_probe::run(args.runs, args.concurrency).await?;
    let noop = bare(args, None).await?;
    let sim = Sim::start(sim::SimConfig {
        latency_ms: 0,
        ..Default::default()
    })?;
    let one_call = OneCall::new(&sim);
    let with_call = match one_call {
        Ok(call) => bare(args, Some(Arc::new(call))).await,
        Err(e) => Err(e),
    };
    sim.stop().await;
    let with_call = with_call?;
    println!(
        "  ratio            pipeline / bare apalis no-op = {:.3}; pipeline / bare apalis with the \
         call = {:.3}; the pipeline's target (at least bare apalis's ~{} jobs/s) is {}",
        pipeline / noop,
        pipeline / with_call,
        thousands(TARGET),
        if pipeline >= TARGET { "met" } else { "NOT met" }
    );
    Ok(())
}

/// The provider call of a one-step run, made by a bare apalis job: freeway's own HTTP client,
/// a non-streaming completion from the simulator.
struct OneCall {
    provider: HttpProvider,
    target: Target,
    request: ChatRequest,
}

impl OneCall {
    fn new(sim: &Sim) -> Result<OneCall, BoxError> {
        Ok(OneCall {
            provider: HttpProvider::new(Timeouts::default())?,
            target: Target {
                base_url: sim.handle().base_url(),
                api_key: ApiKey::new("sk-or-v1-load-bare"),
            },
            request: ChatRequest {
                model: PAID.into(),
                messages: vec![Message::user("Say something about load testing, please.")],
                tools: vec![],
                stream: false,
                max_tokens: None,
                ask_cost: false,
            },
        })
    }
}

/// The time the drain's deliveries held their slots, in ms, from the fleet's delivery counter:
/// read once every run's delivery is counted (the replicas write their counts every 100 ms).
async fn slot_time(cluster: &Cluster, runs: u64) -> Result<f64, BoxError> {
    use freeway::metrics::Metrics;
    let fleet = freeway::fleet::RedisFleet::new(cluster.conn.clone(), cluster.namespace());
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let delivery = fleet.metrics().read().await?.delivery_ms;
        if delivery.count >= runs || Instant::now() > deadline {
            return Ok(delivery.sum as f64);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The full pipeline; returns its runs/s.
async fn pipeline(
    args: &Args,
    worker: &Path,
    sim: &Sim,
    cluster: &mut Cluster,
) -> Result<f64, BoxError> {
    let n = args.runs;
    println!(
        "throughput: {n} chat runs on {PAID} (sim latency 0 ms), {} worker processes × \
         concurrency {}, {} store",
        args.replicas,
        args.concurrency,
        if args.postgres.is_some() {
            "PostgreSQL"
        } else {
            "SQLite"
        }
    );
    let now = freeway::clock::epoch_ms();
    let jobs: Vec<RunJob> = (0..n).map(|i| RunJob::new(request(i), now)).collect();
    let started = Instant::now();
    cluster.queue.push(&jobs).await?;
    let push_s = started.elapsed().as_secs_f64();
    println!(
        "  enqueue          {n} runs in {push_s:.2} s = {} runs/s (Queue::push, no worker running)",
        thousands(n as f64 / push_s)
    );

    let mut conn = cluster.conn.clone();
    let before = Snapshot::take(&mut conn, &[], sim.tid).await?;
    cluster.spawn_fleet(worker, args, sim, &[])?;
    let queue = cluster.queue.clone();
    let drain = drain(&queue, n, args.timeout_s, || cluster.check_workers()).await?;
    let after = Snapshot::take(&mut conn, &cluster.worker_pids(), sim.tid).await?;
    let rate = drain.report("runs", n, "worker start");
    let held_ms = slot_time(cluster, n).await?;

    let calls = sim.handle().calls();
    let not_ok = calls.iter().filter(|c| c.status != 200).count();
    let step = (jobs.len() / SAMPLE).max(1);
    let (mut checked, mut succeeded) = (0, 0);
    let (mut inside_ms, mut call_ms) = (vec![], vec![]);
    for job in jobs.iter().step_by(step) {
        checked += 1;
        let Some(rec) = cluster.store.run(&job.run_id).await? else {
            continue;
        };
        if rec.status == RunStatus::Succeeded {
            succeeded += 1;
        }
        // The worker dates the record when it takes the run (nothing was stored at enqueue).
        inside_ms.push(rec.updated_ms.saturating_sub(rec.created_ms));
        let attempts = cluster.store.attempts(&job.run_id).await?;
        call_ms.extend(attempts.iter().map(|a| a.latency_ms));
    }
    println!(
        "  check            {succeeded}/{checked} sampled runs succeeded in the store; {} sim \
         calls ({:.2} a run), {not_ok} not 200; {} dead jobs",
        calls.len(),
        calls.len() as f64 / n as f64,
        drain.dead
    );
    let mean_inside_s =
        inside_ms.iter().sum::<u64>() as f64 / inside_ms.len().max(1) as f64 / 1000.0;
    let ms = |v: Option<u64>| v.map_or("?".into(), |v| format!("{v} ms"));
    let slots = u64::from(args.replicas) * u64::from(args.concurrency);
    println!(
        "  inside a run     first save → last save median {}, p90 {}; sim call median {}, p90 \
         {}; ≈ {:.0} runs between their saves at a time (rate × mean time between)",
        ms(quantile(&mut inside_ms, 0.5)),
        ms(quantile(&mut inside_ms, 0.9)),
        ms(quantile(&mut call_ms, 0.5)),
        ms(quantile(&mut call_ms, 0.9)),
        rate * mean_inside_s,
    );
    println!(
        "  slots            {:.0} % busy through the drain ({:.0} of {slots} on average: the \
         deliveries' time in their slots, freeway_delivery_seconds, over the drain's)",
        100.0 * held_ms / (slots as f64 * drain.total_s * 1000.0),
        held_ms / (drain.total_s * 1000.0),
    );
    println!("  cpu              {}", after.cpu(&before, drain.total_s));
    println!("  redis            {}", after.redis_per(&before, n, "run"));
    println!("  pipeline         {}", after.pipeline_per(&before, n));
    if succeeded < checked {
        return Err(format!("{} sampled runs did not succeed", checked - succeeded).into());
    }
    Ok(rate)
}

/// Bare apalis: the same queue settings, in-process workers, jobs that do nothing or make
/// `call`; returns its jobs/s.
async fn bare(args: &Args, call: Option<Arc<OneCall>>) -> Result<f64, BoxError> {
    let mut conn = freeway::connect::redis(&args.redis_url).await?;
    let ns = fresh_namespace("bare");
    let queue = Queue::new(conn.clone(), &ns);
    let rate = bare_drain(args, &queue, &mut conn, call).await;
    delete_namespace(&mut conn, &ns).await?;
    rate
}

async fn bare_drain(
    args: &Args,
    queue: &Queue,
    conn: &mut freeway::connect::RedisConnection,
    call: Option<Arc<OneCall>>,
) -> Result<f64, BoxError> {
    let n = args.runs;
    let what = if call.is_some() {
        "jobs making one provider call each (a simulator of their own)"
    } else {
        "no-op jobs"
    };
    println!(
        "bare apalis: {n} {what}, {} in-process workers × concurrency {}, same queue settings \
         (storage_config, poll every {} ms)",
        args.replicas,
        args.concurrency,
        POLL.as_millis()
    );
    let payloads = (0..n).map(|i| i.to_string().into_bytes()).collect();
    let started = Instant::now();
    queue.push_payloads(payloads).await?;
    let push_s = started.elapsed().as_secs_f64();
    println!(
        "  enqueue          {n} jobs in {push_s:.2} s = {} jobs/s (push_payloads: no idempotency key)",
        thousands(n as f64 / push_s)
    );

    let before = Snapshot::take(conn, &[], None).await?;
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    // One Monitor per worker, each on its own task, like one per process: a single Monitor
    // polls all its workers from one task, which would keep them on one core.
    let monitors: Vec<_> = (0..args.replicas)
        .map(|i| {
            let concurrency = usize::from(args.concurrency);
            let slots = Arc::new(tokio::sync::Semaphore::new(concurrency));
            let storage = queue.storages(&slots, concurrency).remove(0);
            let name = format!("load-bare-{}-{i}", std::process::id());
            let call = call.clone();
            let mut stop = stop_rx.clone();
            tokio::spawn(
                Monitor::new()
                    .register(move |restarts| {
                        WorkerBuilder::new(format!("{name}-r{restarts}"))
                            .backend(storage.clone().poll_with_interval(POLL))
                            .layer(GlobalConcurrencyLimitLayer::with_semaphore(slots.clone()))
                            .data(call.clone())
                            .build(bare_job)
                    })
                    .run_with_signal(async move {
                        let _ = stop.wait_for(|stopped| *stopped).await;
                        Ok(())
                    }),
            )
        })
        .collect();
    let drained = drain(queue, n, args.timeout_s, || {
        if monitors.iter().any(|m| m.is_finished()) {
            Err("a bare apalis worker stopped early".into())
        } else {
            Ok(())
        }
    })
    .await;
    let after = Snapshot::take(conn, &[], None).await?;
    let _ = stop_tx.send(true);
    for m in monitors {
        match tokio::time::timeout(Duration::from_secs(10), m).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(e))) => eprintln!("load: a bare apalis worker ended with: {e}"),
            Ok(Err(e)) => eprintln!("load: a bare apalis worker panicked: {e}"),
            Err(_) => eprintln!("load: a bare apalis worker did not stop within 10 s"),
        }
    }
    let drained = drained?;
    let rate = drained.report("jobs", n, "worker start");
    println!(
        "  cpu              {} (the workers are in this process)",
        after.cpu(&before, drained.total_s)
    );
    println!("  redis            {}", after.redis_per(&before, n, "job"));
    Ok(rate)
}

async fn bare_job(
    _job: serde_json::Value,
    call: Data<Option<Arc<OneCall>>>,
) -> Result<(), BoxDynError> {
    let Some(call) = call.as_ref() else {
        return Ok(());
    };
    let deltas = freeway::provider::Deltas::default();
    call.provider
        .call(&call.target, &call.request, &deltas)
        .await
        .map_err(|e| format!("the provider call failed: {e}"))?;
    Ok(())
}

/// How a backlog drained.
struct Drain {
    total_s: f64,
    first_s: f64,
    half_s: f64,
    dead: u64,
}

impl Drain {
    /// Print the rate lines; returns items/s end to end.
    fn report(&self, what: &str, n: u64, since: &str) -> f64 {
        let rate = n as f64 / self.total_s;
        println!(
            "  drain            {n} {what} in {:.2} s = {} {what}/s ({since} → last done)",
            self.total_s,
            thousands(rate)
        );
        let (first, second) = (self.half_s - self.first_s, self.total_s - self.half_s);
        // A half shorter than a few reads has no meaningful rate.
        let halves = if first.min(second) >= 3.0 * READ_EVERY.as_secs_f64() {
            format!(
                "first half {} {what}/s, second half {} {what}/s (a backlog-bound fetch makes \
                 the first half slower)",
                thousands((n / 2) as f64 / first),
                thousands((n - n / 2) as f64 / second)
            )
        } else {
            "too quick to compare its halves".into()
        };
        println!(
            "                   first done after {:.0} ms; {halves}",
            self.first_s * 1000.0
        );
        rate
    }
}

/// Poll the queue's done and dead sets until `n` jobs are finished; `check` fails fast when a
/// consumer died.
async fn drain(
    queue: &Queue,
    n: u64,
    timeout_s: u64,
    mut check: impl FnMut() -> Result<(), BoxError>,
) -> Result<Drain, BoxError> {
    let started = Instant::now();
    let (mut first_s, mut half_s) = (None, None);
    loop {
        let d = queue.depths().await?;
        let finished = d.done + d.dead;
        let now_s = started.elapsed().as_secs_f64();
        if finished > 0 && first_s.is_none() {
            first_s = Some(now_s);
        }
        if finished >= n / 2 && half_s.is_none() {
            half_s = Some(now_s);
        }
        if finished >= n {
            return Ok(Drain {
                total_s: now_s,
                first_s: first_s.unwrap_or(now_s),
                half_s: half_s.unwrap_or(now_s),
                dead: d.dead,
            });
        }
        check()?;
        if now_s > timeout_s as f64 {
            return Err(format!(
                "only {finished} of {n} finished after {timeout_s} s (depths: {d:?})"
            )
            .into());
        }
        tokio::time::sleep(READ_EVERY).await;
    }
}
