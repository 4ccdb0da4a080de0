//! `load`: freeway's load benchmark, a committed command rather than a one-off experiment, so that
//! a change to the queue, the engine or the store can be checked against the same figures.
//!
//! Each scenario runs on a fresh namespace of the Redis at `REDIS_URL`, a fresh store (a SQLite
//! file in a temp folder, or a PostgreSQL database with `--postgres`), the simulator in-process on
//! a thread of its own (one core, as `sim/examples/loadgen.rs` does) and real `worker` processes
//! (the binary next to this one). The command line is `args`; the runs most scenarios push are
//! `workload`'s.
//!
//! - `throughput`: N runs on one paid route with the simulator at zero latency, pushed while no
//!   worker runs, then drained by K replicas; the same N as bare apalis no-op jobs on the same
//!   Redis with the same queue settings. The goal is for the pipeline to reach ~5,000 runs/s, bare
//!   apalis's rate on this kind of machine (with leases on; the queue runs with them off), and a
//!   backlog must not slow the fetch.
//! - `quota`: K replicas and M users share one free-model account of R calls a window, offered
//!   more than R; it shows what the shared rests buy: calls per run, 429s, delayed and failed
//!   runs, and goodput as a fraction of R.
//! - `latency`: one replica at a high concurrency on a slow simulator (`--latency-ms`): runs/s
//!   against the slots' C / L, runs in flight, peak RSS, take → attempt percentiles.
//! - `soak`: `--runs` through one replica in rounds of 10,000, its RSS after each round.
//! - `enqueue`: `POST /v1/runs` and `POST /v1/runs:batch` against `producer serve` (built next
//!   to the worker) while replicas drain the runs.
//! - `hostile`: one idempotency key raced by 10 requests, five identical keyed batches at once,
//!   ten retries of one run at once, then 3,000 made-up models from 150 users: runs per key, the
//!   provider calls, Redis's memory and the size of the rests list, every answer's status.
//! - `tenants`: fair share (docs/design.md §4.7): one tenant's backlog of 500 runs on a free
//!   account, four tenants of 5 runs each arriving behind it, each window's split between them;
//!   `--weights`: two backlogged tenants of tiers weighing 4 and 1.
//! - `spend`: spend caps (docs/design.md §4.8): 20 tenants capped at $0.10 a day race for a
//!   priced model on K replicas (`--runs` in all); each tenant's recorded spend against its cap.
//! - `search`: the run list's text search: `--runs` runs stored (inputs and answers of a
//!   5,000-word vocabulary), then each kind of search the board makes timed, median of 20.
//!
//! `cargo build --release -p worker -p producer --bins --examples && target/release/examples/load
//! --help`

mod args;
mod cluster;
mod enqueue;
mod hostile;
mod latency;
mod measure;
mod oracle;
mod quota;
mod search;
mod serve;
mod spend;
mod store_probe;
mod tenants;
mod throughput;
mod workload;

use args::{Args, BoxError, Scenario};
use clap::Parser;
use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args = Args::parse();
    if !(args.offered.is_finite() && args.offered > 0.0) {
        eprintln!("load: --offered must be a positive number");
        return ExitCode::from(2);
    }
    if args
        .arrive_after_s
        .is_some_and(|s| !(s.is_finite() && s >= 0.0))
    {
        eprintln!("load: --arrive-after-s must be a number of seconds, 0 or more");
        return ExitCode::from(2);
    }
    let worker = match args.worker.clone().map_or_else(worker_binary, Ok) {
        Ok(w) => w,
        Err(e) => {
            eprintln!("load: {e}");
            return ExitCode::from(2);
        }
    };
    // Two threads for the polling and the in-process no-op workers, as many as a worker process
    // gets on this 2-core machine; the simulator has a thread of its own.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    match runtime.block_on(run(&args, &worker)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("load: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: &Args, worker: &std::path::Path) -> Result<(), BoxError> {
    measure::header(args).await?;
    if matches!(args.scenario, Scenario::Throughput | Scenario::Both) {
        throughput::run(args, worker).await?;
    }
    if matches!(args.scenario, Scenario::Quota | Scenario::Both) {
        quota::run(args, worker).await?;
    }
    match args.scenario {
        Scenario::Latency => latency::latency(args, worker).await?,
        Scenario::Soak => latency::soak(args, worker).await?,
        Scenario::Enqueue => enqueue::run(args, worker).await?,
        Scenario::Hostile => hostile::run(args, worker).await?,
        Scenario::Tenants => tenants::run(args, worker).await?,
        Scenario::Spend => spend::run(args, worker).await?,
        Scenario::Search => search::run(args).await?,
        Scenario::Throughput | Scenario::Quota | Scenario::Both => {}
    }
    println!("load average at the end: {}", measure::load_average());
    Ok(())
}

/// `target/<profile>/worker`, next to `target/<profile>/examples/load`.
fn worker_binary() -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot locate this binary: {e}"))?;
    let path = exe
        .parent()
        .and_then(|examples| examples.parent())
        .map(|profile| profile.join("worker"))
        .ok_or_else(|| format!("{} has no grandparent folder", exe.display()))?;
    if path.is_file() {
        Ok(path)
    } else {
        Err(format!(
            "the worker binary is missing at {}: build it with \
             `cargo build --release -p worker --bins --examples`",
            path.display()
        ))
    }
}
