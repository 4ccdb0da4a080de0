//! The shared-quota scenario: K replicas serve M users whose runs go to free models of one
//! simulated account (R calls a window), offered faster than R, with the pool declared (by
//! default) at R a window (`FREEWAY_CONFIG`). What freeway promises here (docs/design.md §2.2, §4.2, §4.4): it
//! paces calls so the account's R calls a window are all used (goodput near 1) without earning
//! a 429; with `--chain free-paid` the overflow goes to the paid model (R·windows free calls,
//! the rest paid), with `--chain free` runs wait, holding slots of later windows, and the last
//! one ends when the pool's rate allows it. An older worker (`--worker`) shows the same load
//! without pacing.
//!
//! The account need not be what freeway is told: `--declare` misstates its limit
//! (`double`), its window kind (`wrong-kind`) or says nothing (`none`), `--sim-window` makes the
//! account's window start at each window's first call or slide, and `--learning off` keeps the
//! workers from learning what the provider states. The figures that tell: platform 429s, goodput
//! against the free slots of the run's time, and paid calls against the fewest an oracle that
//! knew the account's real window would have made (`oracle.rs`).

use crate::args::{Args, BoxError, Chain, Declare, SimWindow, Switch};
use crate::cluster::{Cluster, Sim, with_cluster};
use crate::measure::{Snapshot, quantile};
use crate::oracle::Oracle;
use freeway::catalog::Catalog;
use freeway::job::{MAX_DEADLINE_S, OnRest, RunJob, RunRequest};
use freeway::route::RouteSpec;
use freeway::run::{RunRecord, RunStatus};
use freeway::store::Store;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::time::{Duration, Instant};

const FREE_A: &str = "meta-llama/llama-3.3-70b-instruct:free";
const FREE_B: &str = "qwen/qwen3-coder:free";
const PAID: &str = "openai/gpt-4o-mini";
/// `--chain providers`: the simulator's Groq and Gemini free tiers, between OpenRouter's and paid.
const GROQ: &str = "groq:llama-3.3-70b-versatile";
const GEMINI: &str = "gemini:gemini-2.5-flash";
/// Their limits, as the simulator plays them: Groq's minute (its day of 1,000 is not reached
/// here), Gemini's minute and its Pacific day.
const GROQ_RPM: u32 = 30;
const GEMINI_RPM: u32 = 10;
const GEMINI_RPD: u32 = 25;
/// The keys the workers spend them with.
const PROVIDER_KEYS: [(&str, &str); 3] = [
    ("GROQ_API_KEY", "gsk_load"),
    ("GEMINI_API_KEY", "AIza-load"),
    ("PAID_API_KEY", "sk-paid-load"),
];
/// The built-in pool of OpenRouter's free models, and the one `--declare none` puts in its place.
const POOL: &str = "openrouter-free";
const UNDECLARED: &str = "openrouter-free-undeclared";
/// How often the store is read for runs that have not ended yet.
const POLL: Duration = Duration::from_millis(250);

pub(crate) async fn run(args: &Args, worker: &Path) -> Result<(), BoxError> {
    let sim = Sim::start(sim::SimConfig {
        rpm: args.rpm,
        rpd: args.rpd,
        window_s: args.window_s,
        window_align: match args.sim_window {
            SimWindow::FirstCall => sim::WindowAlign::FirstCall,
            SimWindow::Epoch | SimWindow::Sliding => sim::WindowAlign::Epoch,
        },
        window_kind: match args.sim_window {
            SimWindow::Sliding => sim::WindowKind::Sliding,
            SimWindow::Epoch | SimWindow::FirstCall => sim::WindowKind::Fixed,
        },
        state_limits: args.state_limits,
        latency_ms: 0,
        groq_rpm: GROQ_RPM,
        gemini_rpm: GEMINI_RPM,
        gemini_rpd: GEMINI_RPD,
        ..Default::default()
    })?;
    with_cluster(sim, args, "quota", async |sim, cluster| {
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
    let rate = args.offered * f64::from(r) / window_s as f64;
    let chain = match args.chain {
        Chain::FreePaid => format!("[{FREE_A}, {FREE_B}, {PAID}] (on_rest: refuse)"),
        Chain::Free => format!("[{FREE_A}, {FREE_B}] (on_rest: queue)"),
        Chain::Providers => format!(
            "[{FREE_A}, {GROQ} ({GROQ_RPM} a minute), {GEMINI} ({GEMINI_RPM} a minute, \
             {GEMINI_RPD} a Pacific day), {PAID}] (on_rest: refuse)"
        ),
    };
    let (declared, told) = declaration(args, sim);
    let catalog = Catalog::from_toml(&declared)?;
    let real = match args.sim_window {
        SimWindow::Epoch => "fixed, epoch-aligned",
        SimWindow::FirstCall => "fixed, from each window's first call",
        SimWindow::Sliding => "sliding",
    };
    let learning = match args.learning {
        Switch::On => "on",
        Switch::Off => "off",
    };
    println!(
        "quota: {} worker processes × concurrency {}, {} users offering {:.2} runs/s ({} × R) \
         for {} s to {chain}; sim account R = {r} free calls per {window_s} s window ({real}{}), \
         declared to freeway as {told}; learning {learning}; worker {}",
        args.replicas,
        args.concurrency,
        args.users,
        rate,
        args.offered,
        args.duration_s,
        if args.state_limits {
            ", limits stated on every answer"
        } else {
            ""
        },
        worker.display()
    );
    let config = cluster.dir.join("freeway.toml");
    std::fs::write(&config, declared)?;
    let config = config.to_string_lossy().into_owned();
    let mut conn = cluster.conn.clone();
    let before = Snapshot::take(&mut conn, &[], sim.tid).await?;
    let mut env = vec![
        ("FREEWAY_CONFIG", config.as_str()),
        ("FREEWAY_LEARN_LIMITS", learning),
    ];
    env.extend(PROVIDER_KEYS);
    cluster.spawn_fleet(worker, args, sim, &env)?;
    let started = Instant::now();
    let jobs = offer(args, rate, &cluster.queue, &catalog).await?;
    let enqueued_s = started.elapsed().as_secs_f64();

    let records = settle(args, cluster, &jobs).await?;
    let total_s = started.elapsed().as_secs_f64();
    let after = Snapshot::take(&mut conn, &cluster.worker_pids(), sim.tid).await?;
    let n = jobs.len() as u64;
    println!(
        "  runs             {n} enqueued in {enqueued_s:.1} s; all ended {total_s:.1} s after \
         the first enqueue"
    );
    report_runs(&jobs, &records);
    let (calls, key_reads) = (sim.handle().calls(), sim.handle().key_reads());
    if args.keep {
        let lines: Vec<String> = calls
            .iter()
            .filter_map(|c| serde_json::to_string(c).ok())
            .collect();
        std::fs::write(cluster.dir.join("sim-calls.jsonl"), lines.join("\n"))?;
    }
    let arrivals: Vec<u64> = jobs.iter().map(|j| j.enqueued_ms).collect();
    report_calls(args, &calls, key_reads, &records, &arrivals, total_s);
    println!("  cpu              {}", after.cpu(&before, total_s));
    println!(
        "  cpu per run      {:.2} ms of the workers' CPU",
        1000.0 * after.workers_cpu_s(&before) / n.max(1) as f64
    );
    Ok(())
}

/// The pool configuration `--declare` asks for, and how it reads; with `--chain providers`,
/// the simulator's Groq and Gemini too (their pools' limits only when declared).
fn declaration(args: &Args, sim: &Sim) -> (String, String) {
    let (openrouter, told) = openrouter_declaration(args);
    if args.chain != Chain::Providers {
        return (openrouter, told);
    }
    let others: String = sim
        .handle()
        .freeway_config()
        .lines()
        .filter(|l| {
            args.declare != Declare::None || !(l.starts_with("rpm =") || l.starts_with("rpd ="))
        })
        .map(|l| format!("{l}\n"))
        .collect();
    let told = match args.declare {
        Declare::None => format!("{told}; Groq's and Gemini's pools declare no limits"),
        _ => format!("{told}; Groq's and Gemini's pools their limits"),
    };
    (format!("{openrouter}\n{others}"), told)
}

/// OpenRouter's free pool as `--declare` asks for it.
fn openrouter_declaration(args: &Args) -> (String, String) {
    let (r, window_s) = (args.rpm, args.window_s);
    let (kind, other) = match args.sim_window {
        SimWindow::Sliding => ("rolling", "fixed"),
        SimWindow::Epoch | SimWindow::FirstCall => ("fixed", "rolling"),
    };
    let (rpm, kind) = match args.declare {
        Declare::Exact => (r, kind),
        Declare::Double => (2 * r, kind),
        Declare::WrongKind => (r, other),
        Declare::None => {
            // The built-in pool declares 20 a minute and a file cannot unset it: the pool is
            // moved off the free models, and one that declares nothing takes them.
            let file = format!(
                "[pools.{POOL}]\nmodels = [\"freeway-load/unused\"]\n\n[pools.{UNDECLARED}]\n\
                 provider = \"openrouter\"\nmodels = [\"*:free\", \"openrouter/free\"]\n"
            );
            return (file, format!("no limits (pool {UNDECLARED})"));
        }
    };
    (
        format!("[pools.{POOL}]\nrpm = {rpm}\nwindow = \"{kind}\"\nwindow_s = {window_s}\n"),
        format!("{rpm} per {window_s} s, {kind}"),
    )
}

/// Each user enqueues at `rate / users` runs/s, users staggered so that the total is steady.
async fn offer(
    args: &Args,
    rate: f64,
    queue: &queue::Queue,
    catalog: &Catalog,
) -> Result<Vec<RunJob>, BoxError> {
    let users = u64::from(args.users);
    let period = Duration::from_secs_f64(users as f64 / rate);
    let start = tokio::time::Instant::now();
    let end = start + Duration::from_secs(args.duration_s);
    // Long enough for the whole backlog to be served: a run must wait, never miss its deadline.
    let deadline_s = (args.duration_s + args.timeout_s).clamp(600, MAX_DEADLINE_S);
    let chain = args.chain;
    let tasks: Vec<_> = (0..users)
        .map(|u| {
            let queue = queue.clone();
            let catalog = catalog.clone();
            tokio::spawn(async move {
                let mut jobs = vec![];
                let mut at = start + Duration::from_secs_f64(u as f64 / rate);
                while at < end {
                    tokio::time::sleep_until(at).await;
                    let job = RunJob::new(
                        request(u, deadline_s, chain, &catalog),
                        freeway::clock::epoch_ms(),
                    );
                    queue.push(std::slice::from_ref(&job)).await?;
                    jobs.push(job);
                    at += period;
                }
                Ok::<_, queue::schedule::QueueError>(jobs)
            })
        })
        .collect();
    let mut all = vec![];
    for t in tasks {
        all.extend(t.await??);
    }
    Ok(all)
}

/// Wait until every run has ended; returns their records.
pub(crate) async fn settle(
    args: &Args,
    cluster: &mut Cluster,
    jobs: &[RunJob],
) -> Result<HashMap<String, RunRecord>, BoxError> {
    let started = Instant::now();
    let mut records = HashMap::new();
    loop {
        for job in jobs {
            if records.contains_key(&job.run_id) {
                continue;
            }
            if let Some(rec) = cluster.store.run(&job.run_id).await?
                && rec.status.is_settled()
            {
                records.insert(job.run_id.clone(), rec);
            }
        }
        if records.len() == jobs.len() {
            return Ok(records);
        }
        cluster.check_workers()?;
        if started.elapsed() > Duration::from_secs(args.timeout_s) {
            return Err(format!(
                "only {} of {} runs ended {} s after the last enqueue",
                records.len(),
                jobs.len(),
                args.timeout_s
            )
            .into());
        }
        tokio::time::sleep(POLL).await;
    }
}

fn report_runs(jobs: &[RunJob], records: &HashMap<String, RunRecord>) {
    let (mut succeeded, mut delayed, mut snoozes) = (0, 0, 0);
    // Failed and refused runs by status and code: the few that did not get through, and why.
    let mut others: BTreeMap<String, u64> = BTreeMap::new();
    let (mut waits_ms, mut pickups_ms) = (vec![], vec![]);
    for job in jobs {
        let Some(rec) = records.get(&job.run_id) else {
            continue;
        };
        if rec.state.snoozes > 0 {
            delayed += 1;
            snoozes += u64::from(rec.state.snoozes);
        }
        // The worker dates the record when it first takes the run (it is stored at its first save).
        pickups_ms.push(rec.created_ms.saturating_sub(job.enqueued_ms));
        if rec.status == RunStatus::Succeeded {
            succeeded += 1;
            waits_ms.push(rec.updated_ms.saturating_sub(job.enqueued_ms));
        } else {
            let code = rec.code.map_or("", |c| c.as_str());
            *others
                .entry(format!("{} {code}", rec.status.as_str()))
                .or_default() += 1;
        }
    }
    let count = |status: &str| -> u64 {
        others
            .iter()
            .filter(|(k, _)| k.starts_with(status))
            .map(|(_, n)| n)
            .sum()
    };
    let detail: Vec<String> = others.iter().map(|(k, n)| format!("{n} {k}")).collect();
    println!(
        "  outcome          {succeeded} succeeded, {} failed, {} refused{}",
        count("failed"),
        count("refused"),
        if detail.is_empty() {
            String::new()
        } else {
            format!(" ({})", detail.join(", "))
        }
    );
    println!(
        "  pickup           enqueue → first taken by a replica median {} ms, max {} ms (an \
         idle replica polls every 50 ms)",
        quantile(&mut pickups_ms, 0.5).unwrap_or(0),
        quantile(&mut pickups_ms, 1.0).unwrap_or(0),
    );
    let s = |v: Option<u64>| v.map_or("?".into(), |ms| format!("{:.1} s", ms as f64 / 1000.0));
    println!(
        "  delayed          {delayed} runs were snoozed at least once ({snoozes} snoozes in \
         all); enqueue → succeeded median {}, p90 {}, max {}",
        s(quantile(&mut waits_ms, 0.5)),
        s(quantile(&mut waits_ms, 0.9)),
        s(quantile(&mut waits_ms, 1.0)),
    );
}

fn report_calls(
    args: &Args,
    calls: &[sim::CallRecord],
    key_reads: u64,
    records: &HashMap<String, RunRecord>,
    arrivals: &[u64],
    total_s: f64,
) {
    let runs = arrivals.len() as u64;
    println!("  quota endpoint   read {key_reads} times (GET /key, one replica a minute)");
    if args.chain == Chain::Providers {
        report_providers(args, calls, arrivals);
        return;
    }
    let counted: u64 = records
        .values()
        .map(|r| u64::from(r.state.counters.calls))
        .sum();
    let free: Vec<&sim::CallRecord> = calls.iter().filter(|c| c.model != PAID).collect();
    let paid = calls.len() - free.len();
    let rejected: Vec<&sim::CallRecord> = calls.iter().filter(|c| c.status == 429).collect();
    let mut variants: BTreeMap<&str, u64> = BTreeMap::new();
    for c in &rejected {
        *variants.entry(c.variant.as_str()).or_default() += 1;
    }
    let variants: Vec<String> = variants.iter().map(|(v, n)| format!("{v} {n}")).collect();
    println!(
        "  calls            {} sim calls = {:.2} a run (the runs' own counters: {counted}): {} \
         free, {paid} paid; {} got 429 ({})",
        calls.len(),
        calls.len() as f64 / runs.max(1) as f64,
        free.len(),
        rejected.len(),
        variants.join(", ")
    );
    // The platform's own refusals; the pool has one instance, the platform key's.
    let platform_429s = rejected
        .iter()
        .filter(|c| c.variant.starts_with("free_per_"))
        .count();
    let instance = match args.declare {
        Declare::None => UNDECLARED,
        _ => POOL,
    };
    println!("  platform 429s    {instance}: {platform_429s}");

    let window_ms = args.window_s * 1000;
    let mut sorted = arrivals.to_vec();
    sorted.sort_unstable();
    let mut oracle = Oracle::new(args.sim_window, args.rpm, window_ms);
    let ok_free: Vec<u64> = free
        .iter()
        .filter(|c| c.status == 200)
        .map(|c| c.t_ms)
        .collect();
    let n = ok_free.len() as u64;
    // The free slots the run had: those the oracle fills from the runs' arrivals when a full
    // pool sends runs elsewhere; the account's rate over the run's time when runs wait.
    let (slots, of_what) = match args.chain {
        Chain::FreePaid => {
            // A run that finds no free slot at its arrival goes to the paid model at once.
            let oracle_free = sorted.iter().filter(|&&at| oracle.try_call(at)).count() as u64;
            let oracle_free = oracle_free.min(u64::from(args.rpd));
            println!(
                "  paid             {paid} paid calls; the oracle's {} ({oracle_free} runs free)",
                runs - oracle_free
            );
            (oracle_free as f64, "the oracle's free calls")
        }
        Chain::Providers => unreachable!("reported by report_providers"),
        Chain::Free => {
            // Runs wait in arrival order for the next slot.
            let (mut last, mut oracle_last) = (0, 0);
            for &at in sorted.iter().take(n as usize) {
                oracle_last = oracle.call(at.max(last));
                last = oracle_last;
            }
            if let Some(&last_ok) = ok_free.iter().max() {
                println!(
                    "  pace             last of {n} free calls {:.1} s after the moment the \
                     oracle makes its {n}th",
                    last_ok.saturating_sub(oracle_last) as f64 / 1000.0
                );
            }
            (
                f64::from(args.rpm) * total_s / args.window_s as f64,
                "R a window over the run's time",
            )
        }
    };
    println!(
        "  goodput          {:.2} ({n} successful free calls / {slots:.0} free slots: \
         {of_what}; the run took {total_s:.0} s, R = {} a {} s window)",
        n as f64 / slots.max(1.0),
        args.rpm,
        args.window_s
    );
    let mut windows: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
    for c in &free {
        let w = windows.entry(c.t_ms / window_ms).or_default();
        match c.status {
            200 => w.0 += 1,
            429 => w.1 += 1,
            _ => {}
        }
    }
    let (Some(&first), Some(&last)) = (windows.keys().next(), windows.keys().next_back()) else {
        return;
    };
    let shown: Vec<String> = (first..=last)
        .map(|w| windows.get(&w).copied().unwrap_or_default())
        .map(|(ok, r)| format!("{ok}/{r}"))
        .collect();
    println!(
        "  per window       ok/429 in epoch-aligned windows of {} s: {}",
        args.window_s,
        shown.join(" ")
    );
}

/// `--chain providers`: each tier's answers and refusals by kind, the paid calls and the free
/// calls against an oracle that knew the four tiers' real limits and took, for each run as it
/// arrived, the first route of its chain with room.
fn report_providers(args: &Args, calls: &[sim::CallRecord], arrivals: &[u64]) {
    let mut tiers: BTreeMap<String, (u64, BTreeMap<&str, u64>)> = BTreeMap::new();
    for c in calls {
        let tier = match c.model == PAID {
            true => "paid".to_string(),
            false => format!("{:?}", c.provider).to_lowercase(),
        };
        let tier = tiers.entry(tier).or_default();
        match c.status {
            200 => tier.0 += 1,
            _ => *tier.1.entry(c.variant.as_str()).or_default() += 1,
        }
    }
    let mut refused = 0;
    for (tier, (ok, refusals)) in &tiers {
        refused += refusals.values().sum::<u64>();
        let refusals: Vec<String> = refusals.iter().map(|(v, n)| format!("{v} {n}")).collect();
        println!(
            "  {tier:<16} {ok} answered; refused: {}",
            match refusals.is_empty() {
                true => "none".to_string(),
                false => refusals.join(", "),
            }
        );
    }
    let mut sorted = arrivals.to_vec();
    sorted.sort_unstable();
    let window_ms = args.window_s * 1000;
    let mut openrouter = Oracle::new(args.sim_window, args.rpm, window_ms);
    let mut groq = Oracle::new(SimWindow::Epoch, GROQ_RPM, window_ms);
    let mut gemini = Oracle::new(SimWindow::Epoch, GEMINI_RPM, 60_000);
    let (mut openrouter_day, mut gemini_day, mut oracle_free) = (0, 0, 0u64);
    for &at in &sorted {
        let free = if openrouter_day < args.rpd && openrouter.try_call(at) {
            openrouter_day += 1;
            true
        } else if groq.try_call(at) {
            true
        } else if gemini_day < GEMINI_RPD && gemini.try_call(at) {
            gemini_day += 1;
            true
        } else {
            false
        };
        oracle_free += u64::from(free);
    }
    let runs = arrivals.len() as u64;
    let free: u64 = tiers
        .iter()
        .filter(|(tier, _)| *tier != "paid")
        .map(|(_, (ok, _))| ok)
        .sum();
    let paid = tiers.get("paid").map_or(0, |(ok, _)| *ok);
    println!(
        "  paid             {paid} paid calls; the oracle's {} ({oracle_free} runs free)",
        runs - oracle_free
    );
    println!(
        "  goodput          {:.2} ({free} successful free calls / the oracle's {oracle_free}); \
         {refused} refusals in all",
        free as f64 / oracle_free.max(1) as f64
    );
}

fn request(user: u64, deadline_s: u64, chain: Chain, catalog: &Catalog) -> RunRequest {
    let (models, on_rest) = match chain {
        Chain::FreePaid => (&[FREE_A, FREE_B, PAID][..], OnRest::Refuse),
        Chain::Free => (&[FREE_A, FREE_B][..], OnRest::Queue),
        Chain::Providers => (&[FREE_A, GROQ, GEMINI, PAID][..], OnRest::Refuse),
    };
    RunRequest {
        deadline_s: Some(deadline_s),
        on_rest: Some(on_rest),
        ..RunRequest::new(
            format!("user-{user}"),
            "Say something about shared quotas, please.",
            models
                .iter()
                .map(|m| RouteSpec::parse_cli(m, catalog))
                .collect(),
        )
    }
}
