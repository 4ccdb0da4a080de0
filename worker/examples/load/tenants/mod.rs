//! The fair-share scenario (docs/design.md §4.7): tenants share one simulated free account of R
//! calls a window, the pool declared at R (`FREEWAY_CONFIG`), every run `on_rest: queue` on one
//! free route.
//!
//! - The goal's workload (default): tenant A enqueues 500 runs (`--backlog-priority`, batch by
//!   default); `--arrive-after-s` later (4 windows by default) tenants B, C, D and E enqueue 5
//!   interactive runs each. From their arrival B–E together should take at least 4/5 of each
//!   window's slots until their runs are done, each finishing within ⌈5 / (R/5)⌉ + 1 windows;
//!   A drains the rest; no slot goes unused while a run waits; no platform 429.
//! - `--weights`: two tenants, of tiers weighing 4 and 1, each enqueue 100 runs at once; while
//!   both wait, each window should split 4:1 ± 1.
//!
//! Each tenant's runs name a free model of their own (`freeway-load/tenant-a:free`, …): every
//! `:free` model shares the account's one window, and the simulator's call log, which records
//! the model but not the caller, then tells exactly whose call each one was and in which of the
//! account's windows it fell. A tenant's runs come from ten users (`a-user-0` … `a-user-9`) and
//! name the tenant in `tenant`: fair share is between tenants, not users.
//!
//! `--before-fair-share` drives workers built before runs carried a tenant (`--worker`, e.g. a
//! build of c6cc77a): the requests carry no `tenant`, `tier` or `priority` (those workers refuse
//! unknown fields) and the configuration no `[tiers]`; the workload is otherwise the same.

mod report;
mod workload;

use crate::args::{Args, BacklogPriority, BoxError};
use crate::cluster::{Cluster, Sim, with_cluster};
use crate::measure::Snapshot;
use freeway::catalog::Catalog;
use freeway::job::{RunJob, RunRequest};
use freeway::pace::Pacer;
use freeway::run::RunRecord;
use freeway::store::Store;
use report::Outcome;
use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use workload::{
    BACKLOG, HEAVY_WEIGHT, POLL, POOL, Pushed, SAMPLE_BEFORE_END_MS, SMALL, Tenant, WEIGHED,
};

pub(crate) async fn run(args: &Args, worker: &Path) -> Result<(), BoxError> {
    let sim = Sim::start(sim::SimConfig {
        rpm: args.rpm,
        rpd: args.rpd,
        window_s: args.window_s,
        latency_ms: 0,
        ..Default::default()
    })?;
    with_cluster(sim, args, "tenants", async |sim, cluster| {
        scenario(args, worker, sim, cluster).await
    })
    .await
}

async fn scenario(
    args: &Args,
    worker: &Path,
    sim: &Sim,
    cluster: &mut Cluster,
) -> Result<(), BoxError> {
    let (r, window_s) = (args.rpm, args.window_s);
    let window_ms = window_s * 1000;
    let fields = !args.before_fair_share;
    let backlog = match args.backlog_priority {
        BacklogPriority::Batch => "batch",
        BacklogPriority::Interactive => "interactive",
    };
    let tenants: Vec<Tenant> = if args.weights {
        vec![
            Tenant {
                name: "P",
                runs: WEIGHED,
                priority: backlog,
                tier: Some("pro"),
            },
            Tenant {
                name: "Q",
                runs: WEIGHED,
                priority: backlog,
                tier: None,
            },
        ]
    } else {
        let mut t = vec![Tenant {
            name: "A",
            runs: BACKLOG,
            priority: backlog,
            tier: None,
        }];
        t.extend(["B", "C", "D", "E"].map(|name| Tenant {
            name,
            runs: SMALL,
            priority: "interactive",
            tier: None,
        }));
        t
    };
    let mut config =
        format!("[pools.{POOL}]\nrpm = {r}\nwindow = \"fixed\"\nwindow_s = {window_s}\n");
    if args.weights && fields {
        config += &format!("\n[tiers.pro]\nweight = {HEAVY_WEIGHT}\n");
    }
    let catalog = Catalog::from_toml(&config)?;
    let arrive_after_s = args.arrive_after_s.unwrap_or(4.0 * window_s as f64);
    let workload = if args.weights {
        format!(
            "P (tier pro, weight {}) and Q (weight 1) each enqueue {WEIGHED} {backlog} runs at once",
            if fields { HEAVY_WEIGHT } else { 1 }
        )
    } else {
        format!(
            "A enqueues {BACKLOG} {backlog} runs; {arrive_after_s:.1} s ({:.2} windows) later B, C, \
             D, E enqueue {SMALL} interactive runs each",
            arrive_after_s / window_s as f64
        )
    };
    println!(
        "tenants: {} worker processes × concurrency {}; sim account R = {r} free calls per \
         {window_s} s window (fixed, epoch-aligned), declared the same; {workload}; every run \
         on_rest queue on one free model of its tenant's; {}; worker {}",
        args.replicas,
        args.concurrency,
        if fields {
            "requests name tenant, tier and priority"
        } else {
            "requests without tenant, tier or priority (--before-fair-share: tenants are users only, all alike)"
        },
        worker.display()
    );
    let path = cluster.dir.join("freeway.toml");
    std::fs::write(&path, &config)?;
    let path = path.to_string_lossy().into_owned();
    let mut conn = cluster.conn.clone();
    let before = Snapshot::take(&mut conn, &[], sim.tid).await?;
    cluster.spawn_fleet(worker, args, sim, &[("FREEWAY_CONFIG", &path)])?;
    // The runs should wait for as long as the backlog takes, never miss their deadline.
    let total: usize = tenants.iter().map(|t| t.runs).sum();
    let drain_s = (total as u64).div_ceil(u64::from(r)) * window_s;
    let deadline_s = (3 * drain_s + 600).min(freeway::job::MAX_DEADLINE_S);

    // The pacer's view of the pool, once a window (workers that predate fair share have none).
    let samples: Arc<Mutex<Vec<(u64, freeway::pace::PoolUse)>>> = Arc::default();
    let sampler = fields.then(|| {
        let fleet = freeway::fleet::RedisFleet::new(cluster.conn.clone(), cluster.namespace());
        let (limits, day) = catalog
            .instance(POOL)
            .expect("the configuration has the free pool");
        let samples = samples.clone();
        tokio::spawn(async move {
            loop {
                let now = freeway::clock::epoch_ms();
                let end = (now / window_ms + 1) * window_ms;
                let at = end.saturating_sub(SAMPLE_BEFORE_END_MS);
                let at = if at <= now { at + window_ms } else { at };
                tokio::time::sleep(Duration::from_millis(at - now)).await;
                let now = freeway::clock::epoch_ms();
                if let Ok(usage) = fleet
                    .pacer()
                    .usage(POOL, &limits, day.day_end_ms(now))
                    .await
                {
                    samples
                        .lock()
                        .expect("samples")
                        .push((now / window_ms, usage));
                }
            }
        })
    });

    let started = Instant::now();
    let t0 = freeway::clock::epoch_ms();
    let mut pushed: Vec<Pushed> = vec![];
    let arrival_ms;
    if args.weights {
        // Both at once, alternating, so neither is ahead by its place in the queue.
        let jobs = interleave(&tenants, &[0, 1], deadline_s, fields, &catalog)?;
        cluster.queue.push(&jobs_of(&jobs)).await?;
        pushed.extend(jobs);
        arrival_ms = t0;
    } else {
        let jobs = interleave(&tenants, &[0], deadline_s, fields, &catalog)?;
        cluster.queue.push(&jobs_of(&jobs)).await?;
        pushed.extend(jobs);
        tokio::time::sleep_until(
            tokio::time::Instant::from_std(started) + Duration::from_secs_f64(arrive_after_s),
        )
        .await;
        arrival_ms = freeway::clock::epoch_ms();
        let jobs = interleave(&tenants, &[1, 2, 3, 4], deadline_s, fields, &catalog)?;
        cluster.queue.push(&jobs_of(&jobs)).await?;
        pushed.extend(jobs);
    }
    let timeout = Duration::from_secs(args.timeout_s.max(drain_s + arrive_after_s as u64 + 60));
    let records = settle(cluster, &pushed, timeout).await?;
    let total_s = started.elapsed().as_secs_f64();
    if let Some(s) = sampler {
        s.abort();
    }
    let after = Snapshot::take(&mut conn, &cluster.worker_pids(), sim.tid).await?;
    let calls = sim.handle().calls();
    if args.keep {
        let lines: Vec<String> = calls
            .iter()
            .filter_map(|c| serde_json::to_string(c).ok())
            .collect();
        std::fs::write(cluster.dir.join("sim-calls.jsonl"), lines.join("\n"))?;
    }
    let samples = samples.lock().expect("samples").clone();
    let outcome = Outcome {
        tenants: &tenants,
        pushed: &pushed,
        records: &records,
        calls: &calls,
        r,
        window_ms,
        t0,
        arrival_ms,
        replicas: args.replicas,
    };
    outcome.report_runs(total_s);
    let table = outcome.windows();
    if args.weights {
        outcome.report_weights(&table, fields);
    } else {
        outcome.report_goal(&table, &samples);
    }
    println!("  cpu              {}", after.cpu(&before, total_s));
    Ok(())
}

/// The runs of `which` tenants, alternating between them while each has runs left.
fn interleave(
    tenants: &[Tenant],
    which: &[usize],
    deadline_s: u64,
    fields: bool,
    catalog: &Catalog,
) -> Result<Vec<Pushed>, BoxError> {
    let now = freeway::clock::epoch_ms();
    let most = which.iter().map(|&t| tenants[t].runs).max().unwrap_or(0);
    let mut out = vec![];
    for i in 0..most {
        for &t in which {
            if i < tenants[t].runs {
                let request = request(&tenants[t], i, deadline_s, fields, catalog)?;
                out.push(Pushed {
                    tenant: t,
                    job: RunJob::new(request, now),
                });
            }
        }
    }
    Ok(out)
}

fn jobs_of(pushed: &[Pushed]) -> Vec<RunJob> {
    pushed.iter().map(|p| p.job.clone()).collect()
}

/// The `i`th run of `tenant`, as a `POST /v1/runs` body would give it.
fn request(
    tenant: &Tenant,
    i: usize,
    deadline_s: u64,
    fields: bool,
    catalog: &Catalog,
) -> Result<RunRequest, BoxError> {
    let mut body = serde_json::json!({
        "user_id": format!("{}-user-{}", tenant.name.to_lowercase(), i % 10),
        "input": format!("Say something about fair shares, please ({} #{i}).", tenant.name),
        "routes": [{ "model": tenant.model() }],
        "deadline_s": deadline_s,
        "on_rest": "queue",
    });
    if fields {
        body["tenant"] = tenant.name.into();
        body["priority"] = tenant.priority.into();
        if let Some(tier) = tenant.tier {
            body["tier"] = tier.into();
        }
    }
    RunRequest::from_json(body.to_string().as_bytes(), catalog).map_err(|e| {
        format!(
            "a run of tenant {}: {}: {}",
            tenant.name, e.field, e.message
        )
        .into()
    })
}

/// Wait until every run has ended; returns their records.
async fn settle(
    cluster: &mut Cluster,
    pushed: &[Pushed],
    timeout: Duration,
) -> Result<HashMap<String, RunRecord>, BoxError> {
    let started = Instant::now();
    let mut records = HashMap::new();
    loop {
        for p in pushed {
            if records.contains_key(&p.job.run_id) {
                continue;
            }
            if let Some(rec) = cluster.store.run(&p.job.run_id).await?
                && rec.status.is_settled()
            {
                records.insert(p.job.run_id.clone(), rec);
            }
        }
        if records.len() == pushed.len() {
            return Ok(records);
        }
        cluster.check_workers()?;
        if started.elapsed() > timeout {
            return Err(format!(
                "only {} of {} runs ended within {} s",
                records.len(),
                pushed.len(),
                timeout.as_secs()
            )
            .into());
        }
        tokio::time::sleep(POLL).await;
    }
}
