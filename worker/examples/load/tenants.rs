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

use crate::args::{Args, BacklogPriority, BoxError};
use crate::cluster::{Cluster, Sim, with_cluster};
use crate::measure::{Snapshot, quantile};
use freeway::catalog::Catalog;
use freeway::job::{RunJob, RunRequest};
use freeway::pace::{Pacer, RedisPacer};
use freeway::run::{RunRecord, RunStatus};
use freeway::store::Store;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The built-in pool of OpenRouter's free models; with one platform key, its one instance.
const POOL: &str = "openrouter-free";
/// The goal's workload: A's backlog, and the runs each of B–E enqueues behind it.
const BACKLOG: usize = 500;
const SMALL: usize = 5;
/// `--weights`: runs each of the two tenants enqueues, and the heavy tenant's tier's weight.
const WEIGHED: usize = 100;
const HEAVY_WEIGHT: u32 = 4;
/// How often the store is read for runs that have not ended yet.
const POLL: Duration = Duration::from_millis(500);
/// The pacer's usage is read this long before each window ends.
const SAMPLE_BEFORE_END_MS: u64 = 400;

struct Tenant {
    name: &'static str,
    runs: usize,
    priority: &'static str,
    tier: Option<&'static str>,
}

impl Tenant {
    fn model(&self) -> String {
        format!("freeway-load/tenant-{}:free", self.name.to_lowercase())
    }
}

/// A run as the scenario pushed it: its tenant (an index) and its job.
struct Pushed {
    tenant: usize,
    job: RunJob,
}

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
        let pacer = RedisPacer::new(cluster.conn.clone(), cluster.namespace());
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
                if let Ok(usage) = pacer.usage(POOL, &limits, day.day_end_ms(now)).await {
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

/// One of the account's windows: its successful calls by tenant, its 429s, and the runs that
/// were enqueued before its end and had not called by then (they waited through some of it).
#[derive(Clone, Default, PartialEq)]
struct Window {
    ok: Vec<u32>,
    rejected: u32,
    waiting_at_end: u64,
    /// When its `r`th successful call came, in ms after its start (or after the first enqueue,
    /// in that one's window); full windows only.
    filled_ms: Option<u64>,
}

impl Window {
    fn total(&self) -> u32 {
        self.ok.iter().sum()
    }
}

struct Outcome<'a> {
    tenants: &'a [Tenant],
    pushed: &'a [Pushed],
    records: &'a HashMap<String, RunRecord>,
    calls: &'a [sim::CallRecord],
    r: u32,
    window_ms: u64,
    t0: u64,
    /// When B–E arrived (`--weights`: when both tenants enqueued).
    arrival_ms: u64,
    replicas: u16,
}

impl Outcome<'_> {
    fn tenant_of(&self, model: &str) -> Option<usize> {
        self.tenants.iter().position(|t| t.model() == model)
    }

    fn report_runs(&self, total_s: f64) {
        let mut by_outcome: BTreeMap<String, u64> = BTreeMap::new();
        for p in self.pushed {
            let key = self.records.get(&p.job.run_id).map_or("?".into(), |rec| {
                let code = rec.code.map_or("", |c| c.as_str());
                format!("{} {code}", rec.status.as_str()).trim().to_string()
            });
            *by_outcome.entry(key).or_default() += 1;
        }
        let outcome: Vec<String> = by_outcome.iter().map(|(k, n)| format!("{n} {k}")).collect();
        println!(
            "  runs             {}: {}; all ended {total_s:.1} s after the first enqueue",
            self.pushed.len(),
            outcome.join(", ")
        );
    }

    /// The account's windows from the first call's to the last's, by their index.
    fn windows(&self) -> BTreeMap<u64, Window> {
        let n = self.tenants.len();
        let mut ok: Vec<(u64, usize)> = vec![];
        let mut table: BTreeMap<u64, Window> = BTreeMap::new();
        for c in self.calls {
            let Some(t) = self.tenant_of(&c.model) else {
                continue;
            };
            let w = table
                .entry(c.t_ms / self.window_ms)
                .or_insert_with(|| Window {
                    ok: vec![0; n],
                    ..Default::default()
                });
            match c.status {
                200 => {
                    w.ok[t] += 1;
                    ok.push((c.t_ms, t));
                }
                429 => w.rejected += 1,
                _ => {}
            }
        }
        let (Some(&first), Some(&last)) = (table.keys().next(), table.keys().next_back()) else {
            return table;
        };
        ok.sort_unstable();
        let mut enqueued: Vec<u64> = self.pushed.iter().map(|p| p.job.enqueued_ms).collect();
        enqueued.sort_unstable();
        for w in first..=last {
            let (start, end) = (w * self.window_ms, (w + 1) * self.window_ms);
            let row = table.entry(w).or_insert_with(|| Window {
                ok: vec![0; n],
                ..Default::default()
            });
            let arrived = enqueued.partition_point(|&e| e < end) as u64;
            let called = ok.partition_point(|&(t, _)| t < end) as u64;
            row.waiting_at_end = arrived.saturating_sub(called);
            // From the window's start, or from the first enqueue when that came later.
            let from = start.max(self.t0);
            let before = ok.partition_point(|&(t, _)| t < start);
            row.filled_ms = ok
                .get(before + self.r as usize - 1)
                .filter(|(t, _)| *t < end)
                .map(|(t, _)| t.saturating_sub(from));
        }
        table
    }

    /// Each window as a row: its index from the arrival's window, calls by tenant, 429s and
    /// runs left waiting at its end; runs of identical rows are folded.
    fn print_windows(&self, table: &BTreeMap<u64, Window>) {
        let arrival_w = self.arrival_ms / self.window_ms;
        let names: Vec<String> = self
            .tenants
            .iter()
            .map(|t| format!("{:>3}", t.name))
            .collect();
        println!(
            "  windows          k = account window from the arrival's (k = 0: arrival {:.2} s into \
             it); successful calls by tenant; 429s; runs enqueued and not yet called at its end",
            (self.arrival_ms % self.window_ms) as f64 / 1000.0
        );
        println!("                     k   ok {} 429 waiting", names.join(""));
        let rows: Vec<(i64, &Window)> = table
            .iter()
            .map(|(&w, row)| (w as i64 - arrival_w as i64, row))
            .collect();
        let mut i = 0;
        while i < rows.len() {
            let (k, row) = rows[i];
            let mut j = i + 1;
            // Fold a run of rows alike but for the waiting runs (a backlog draining).
            while j < rows.len()
                && rows[j].1.ok == row.ok
                && rows[j].1.rejected == row.rejected
                && (rows[j].1.waiting_at_end > 0) == (row.waiting_at_end > 0)
            {
                j += 1;
            }
            let cells: Vec<String> = row
                .ok
                .iter()
                .map(|n| {
                    if *n == 0 {
                        format!("{:>3}", ".")
                    } else {
                        format!("{n:>3}")
                    }
                })
                .collect();
            let (ks, waiting) = if j - i > 2 {
                (
                    format!("{k}..{}", rows[j - 1].0),
                    format!(
                        "{}..{} ({} windows alike)",
                        row.waiting_at_end,
                        rows[j - 1].1.waiting_at_end,
                        j - i
                    ),
                )
            } else {
                j = i + 1;
                (k.to_string(), row.waiting_at_end.to_string())
            };
            println!(
                "                 {ks:>5} {:>4} {} {:>3} {waiting}",
                row.total(),
                cells.join(""),
                row.rejected
            );
            i = j;
        }
    }

    /// Unused slots (fewer than R successful calls in a window at whose end runs still waited),
    /// platform 429s, and how long after a backlogged window's start its last slot was used.
    fn common_checks(&self, table: &BTreeMap<u64, Window>) {
        let r = self.r;
        let waited: Vec<(&u64, &Window)> =
            table.iter().filter(|(_, w)| w.waiting_at_end > 0).collect();
        let unused: Vec<String> = waited
            .iter()
            .filter(|(_, w)| w.total() < r)
            .map(|(w, row)| {
                format!(
                    "k={} {}/{r} with {} waiting",
                    **w as i64 - (self.arrival_ms / self.window_ms) as i64,
                    row.total(),
                    row.waiting_at_end
                )
            })
            .collect();
        let unused_slots: u32 = waited
            .iter()
            .map(|(_, w)| r.saturating_sub(w.total()))
            .sum();
        let mut fill: Vec<u64> = waited.iter().filter_map(|(_, w)| w.filled_ms).collect();
        let platform: Vec<&sim::CallRecord> = self
            .calls
            .iter()
            .filter(|c| c.status == 429 && c.variant.starts_with("free_per_"))
            .collect();
        let other_429s = self.calls.iter().filter(|c| c.status == 429).count() - platform.len();
        let over: Vec<String> = table
            .iter()
            .filter(|(_, w)| w.total() > r)
            .map(|(w, row)| format!("window {w}: {}", row.total()))
            .collect();
        println!(
            "  window fill      a window at whose end runs still waited had its {r}th call {} ms \
             (median), {} ms (max) after its start or the first enqueue ({} such windows){}",
            quantile(&mut fill, 0.5).map_or("?".into(), |v| v.to_string()),
            quantile(&mut fill, 1.0).map_or("?".into(), |v| v.to_string()),
            waited.len(),
            if over.is_empty() {
                String::new()
            } else {
                format!("; over R: {}", over.join(", "))
            }
        );
        let no_unused = unused.is_empty();
        println!(
            "  [{}] no slot unused while a run waits: {unused_slots} unused slots in {} of {} \
             windows with runs waiting at their end{}",
            mark(no_unused),
            unused.len(),
            waited.len(),
            if no_unused {
                String::new()
            } else {
                format!(" ({})", unused.join(", "))
            }
        );
        let no_429s = platform.is_empty();
        println!(
            "  [{}] 0 platform 429s: {} platform 429s ({other_429s} other 429s){}",
            mark(no_429s),
            platform.len(),
            platform.first().map_or(String::new(), |c| format!(
                ", the first at {} ms into its window",
                c.t_ms % self.window_ms
            ))
        );
    }

    fn report_goal(
        &self,
        table: &BTreeMap<u64, Window>,
        samples: &[(u64, freeway::pace::PoolUse)],
    ) {
        let (r, wms) = (self.r, self.window_ms as f64);
        let arrival_w = self.arrival_ms / self.window_ms;
        self.print_windows(table);

        // Completion, by tenant, in windows after B–E's arrival.
        println!("  completion       windows after B–E's arrival (A: after its own enqueue too)");
        let mut finish: Vec<Vec<u64>> = vec![vec![]; self.tenants.len()];
        for p in self.pushed {
            if let Some(rec) = self.records.get(&p.job.run_id)
                && rec.status == RunStatus::Succeeded
            {
                finish[p.tenant].push(rec.updated_ms);
            }
        }
        let rel = |ms: u64| (ms as f64 - self.arrival_ms as f64) / wms;
        for (t, tenant) in self.tenants.iter().enumerate() {
            let f = &mut finish[t];
            f.sort_unstable();
            let (Some(&first), Some(&last)) = (f.first(), f.last()) else {
                println!("                   {}: no run succeeded", tenant.name);
                continue;
            };
            let since_own = if t == 0 {
                format!(" ({:.2} after A's enqueue)", (last - self.t0) as f64 / wms)
            } else {
                String::new()
            };
            println!(
                "                   {} {:>3} runs ({}): first {:+.2}, last {:+.2}{since_own}",
                tenant.name,
                f.len(),
                tenant.priority,
                rel(first),
                rel(last)
            );
        }

        // B–E's share of each window from their arrival until their runs are done.
        let late = 1..self.tenants.len();
        let late_total = self.tenants[1..].iter().map(|t| t.runs).sum::<usize>() as u32;
        let late_in_arrival: u32 = table
            .get(&arrival_w)
            .map_or(0, |row| row.ok[late.clone()].iter().sum());
        let in_arrival = self
            .calls
            .iter()
            .filter(|c| {
                c.status == 200
                    && c.t_ms >= self.arrival_ms
                    && c.t_ms / self.window_ms == arrival_w
                    && self.tenant_of(&c.model).is_some()
            })
            .count();
        let mut left = late_total.saturating_sub(late_in_arrival);
        let mut shares = vec![];
        let mut share_met = true;
        for (&w, row) in table.range(arrival_w + 1..) {
            if left == 0 {
                break;
            }
            let got: u32 = row.ok[late.clone()].iter().sum();
            let need = f64::from(left).min(0.8 * f64::from(r));
            let met = f64::from(got) >= need;
            share_met &= met;
            shares.push(format!(
                "k={} {got}/{}{}",
                w - arrival_w,
                row.total(),
                if met { "" } else { " (short)" }
            ));
            left = left.saturating_sub(got);
        }
        println!("  goal (docs/design.md §4.7)");
        println!(
            "  [{}] B–E take ≥ 4/5 of each window's slots from their arrival until done (or all \
             they still need): {}; in the arrival window (k=0) {in_arrival} calls came after \
             their arrival, {late_in_arrival} of them theirs",
            mark(share_met && left == 0),
            shares.join(", ")
        );
        let bound = (SMALL as f64 / (f64::from(r) / 5.0)).ceil() + 1.0;
        let mut within = true;
        let each: Vec<String> = late
            .clone()
            .map(|t| {
                let last = finish[t].last().map_or(f64::INFINITY, |&ms| rel(ms));
                within &= last <= bound && finish[t].len() == self.tenants[t].runs;
                format!("{} {last:.2}", self.tenants[t].name)
            })
            .collect();
        println!(
            "  [{}] each of B–E finishes within ⌈{SMALL} / ({r}/5)⌉ + 1 = {bound} windows of its \
             arrival: {}",
            mark(within),
            each.join(", ")
        );
        // A drains the rest: every slot B–E leave goes to A while A waits.
        let a_total = self.tenants[0].runs;
        let a_done = finish[0].len() == a_total;
        let ideal = (self.pushed.len() as u64).div_ceil(u64::from(r));
        let last_w = table.keys().next_back().copied().unwrap_or(0);
        let first_w = self.t0 / self.window_ms;
        println!(
            "  [{}] A drains the rest: {} of {a_total} A runs succeeded, the last call in the \
             {}th window from A's enqueue's; {} runs at R a window fill {ideal}",
            mark(a_done && last_w - first_w < ideal),
            finish[0].len(),
            last_w - first_w + 1,
            self.pushed.len(),
        );
        self.common_checks(table);
        println!(
            "  [{}] with 3 replicas: {} replicas",
            mark(self.replicas == 3),
            self.replicas
        );
        // What the pacer said (GET /v1/pools), around the arrival.
        let shown: Vec<String> = samples
            .iter()
            .filter(|(w, _)| *w + 1 >= arrival_w && *w <= arrival_w + bound as u64 + 1)
            .map(|(w, u)| {
                let shares: Vec<String> = u
                    .shares
                    .iter()
                    .map(|s| format!("{} {}", s.tenant, s.slots))
                    .collect();
                format!(
                    "k={}: {} waiting, {} tenants waiting, shares [{}]",
                    *w as i64 - arrival_w as i64,
                    u.waiting,
                    u.tenants_waiting,
                    shares.join(", ")
                )
            })
            .collect();
        if !shown.is_empty() {
            println!(
                "  pacer usage      {} ms before each window's end: {}",
                SAMPLE_BEFORE_END_MS,
                shown.join("; ")
            );
        }
    }

    fn report_weights(&self, table: &BTreeMap<u64, Window>, fields: bool) {
        let r = self.r;
        self.print_windows(table);
        let weight = if fields { HEAVY_WEIGHT } else { 1 };
        let heavy_share = f64::from(HEAVY_WEIGHT) / f64::from(HEAVY_WEIGHT + 1);
        // Windows at whose end both tenants still had runs waiting: both were backlogged.
        let mut called = [0u64; 2];
        let mut enqueued = [0u64; 2];
        for p in self.pushed {
            enqueued[p.tenant] += 1;
        }
        let mut splits = vec![];
        let mut met = true;
        for (&w, row) in table {
            let before = called;
            called[0] += u64::from(row.ok[0]);
            called[1] += u64::from(row.ok[1]);
            let both = (0..2).all(|t| called[t] < enqueued[t]);
            // The first window's slots went to the first runs taken, before anyone waited.
            if !both || w * self.window_ms <= self.t0 || before == [0, 0] {
                continue;
            }
            let want = heavy_share * f64::from(row.total());
            let ok = (f64::from(row.ok[0]) - want).abs() <= 1.0;
            met &= ok;
            splits.push(format!(
                "{}:{}{}",
                row.ok[0],
                row.ok[1],
                if ok { "" } else { "!" }
            ));
        }
        println!(
            "  [{}] while both wait, each window splits {HEAVY_WEIGHT}:1 ± 1 (P {:.0} ± 1 of \
             {r}; weights configured {weight}:1): P:Q {}",
            mark(met && !splits.is_empty()),
            heavy_share * f64::from(r),
            splits.join(" ")
        );
        self.common_checks(table);
    }
}

fn mark(met: bool) -> &'static str {
    if met { "met" } else { "NOT met" }
}
