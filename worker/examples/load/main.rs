//! `load`: freeway's load benchmark (issue 5 item 7), a committed command rather than a one-off
//! experiment, so that a change to the queue, the engine or the store can be checked against the
//! same figures.
//!
//! Two scenarios, each on a fresh namespace of the Redis at `REDIS_URL`, a fresh store (a SQLite
//! file in a temp folder, or a PostgreSQL database with `--postgres`), the simulator in-process on a thread of its own (one core, as
//! `sim/examples/loadgen.rs` does) and real `worker` processes (the binary next to this one):
//!
//! - `throughput`: N runs on one paid route with the simulator at zero latency, pushed while no
//!   worker runs, then drained by K replicas; the same N as bare apalis no-op jobs on the same
//!   Redis with the same queue settings. The issue asks the pipeline to reach ~5,000 runs/s, bare
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
//! - `tenants`: fair share (docs/design.md §4.8): one tenant's backlog of 500 runs on a free
//!   account, four tenants of 5 runs each arriving behind it, each window's split between them;
//!   `--weights`: two backlogged tenants of tiers weighing 4 and 1.
//! - `spend`: spend caps (docs/design.md §4.9): 20 tenants capped at $0.10 a day race for a
//!   priced model on K replicas (`--runs` in all); each tenant's recorded spend against its cap.
//! - `search`: the run list's text search: `--runs` runs stored (inputs and answers of a
//!   5,000-word vocabulary), then each kind of search the board makes timed, median of 20.
//!
//! `cargo build --release -p worker -p producer --bins --examples && target/release/examples/load --help`

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

use clap::{Parser, ValueEnum};
use std::path::PathBuf;
use std::process::ExitCode;

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Chain {
    FreePaid,
    Free,
}

/// quota: what the pool configuration tells freeway of the account's limits.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Declare {
    /// The account's limit and window kind.
    Exact,
    /// Twice the account's limit.
    Double,
    /// The account's limit with the other window kind (fixed ↔ rolling).
    WrongKind,
    /// No limit: freeway has only what the provider says.
    None,
}

/// quota: the simulated account's window (`sim --window-align`, `--window-kind`).
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SimWindow {
    /// Fixed, at multiples of the window since the epoch (as OpenRouter's minute).
    Epoch,
    /// Fixed, from the first call of each window.
    FirstCall,
    /// At most R calls in any interval of the window's length.
    Sliding,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Switch {
    On,
    Off,
}

/// tenants: the priority of the backlogged tenants' runs.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BacklogPriority {
    Batch,
    Interactive,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Scenario {
    Throughput,
    Quota,
    /// throughput then quota.
    Both,
    Latency,
    Soak,
    Enqueue,
    /// Racing idempotency keys, batches and retries, and thousands of made-up models, as a
    /// hostile but ordinary client sends them (docs/design.md §4.3, §3.3).
    Hostile,
    /// Fair share between tenants on one free account (docs/design.md §4.8).
    Tenants,
    /// 20 tenants at a daily spend cap racing for a priced model (docs/design.md §4.9).
    Spend,
    /// The run list's text search over `--runs` stored runs.
    Search,
}

#[derive(Parser)]
#[command(
    name = "load",
    about = "freeway's load benchmark: end-to-end throughput against bare apalis, the \
             shared-quota scenario, a slow provider at high concurrency, a memory soak, and \
             fair share between tenants",
    after_help = "Needs a Redis (REDIS_URL) and the worker binary next to this one: \
                  cargo build --release -p worker -p producer --bins --examples (the enqueue \
                  scenario also runs the producer binary). Worker processes log at \
                  RUST_LOG (default warn) into the scenario's temp folder."
)]
pub struct Args {
    /// Which scenario to run.
    #[arg(long, value_enum, default_value_t = Scenario::Both)]
    scenario: Scenario,
    /// Worker processes (replicas).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub replicas: u16,
    /// Runs executed at once by each replica (`worker --concurrency`).
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u16).range(1..=10_000))]
    pub concurrency: u16,
    /// throughput: runs pushed, and no-op jobs pushed for the bare apalis comparison.
    #[arg(long, default_value_t = 5_000, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub runs: u64,
    /// latency: how long the simulator takes to answer each call, in ms.
    #[arg(long, default_value_t = 2_000, value_parser = clap::value_parser!(u64).range(0..=600_000))]
    pub latency_ms: u64,
    /// quota: users enqueueing runs.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u16).range(1..=10_000))]
    pub users: u16,
    /// quota: free-model calls the simulated account allows per window (its "rpm"; with a window
    /// shorter than 60 s it is a per-window limit, not per minute).
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..))]
    pub rpm: u32,
    /// quota: free-model calls the simulated account allows per UTC day (OpenRouter's 50 for an
    /// account that never bought credits); out of the way by default. freeway is not told: it
    /// learns the day's limit from the simulated `GET /key`.
    #[arg(long, default_value_t = 1_000_000, value_parser = clap::value_parser!(u32).range(1..))]
    pub rpd: u32,
    /// quota: the account's window in seconds. 10 s keeps the scenario quick; freeway reads the
    /// rest's end from `X-RateLimit-Reset`, so it behaves as with the real 60 s window.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub window_s: u64,
    /// quota: seconds during which users enqueue.
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub duration_s: u64,
    /// quota: offered load as a multiple of the account's rate (R per window).
    #[arg(long, default_value_t = 1.5)]
    pub offered: f64,
    /// quota: the runs' chain: `free-paid` ([free A, free B, paid], on_rest refuse: a full pool
    /// sends runs to the paid model) or `free` ([free A, free B], on_rest queue: runs wait).
    #[arg(long, value_enum, default_value_t = Chain::FreePaid)]
    pub chain: Chain,
    /// quota: the pool's declared limits against the account's real ones: `exact`, `double`
    /// (twice R), `wrong-kind` (R, the other window kind), `none` (no limits configured).
    #[arg(long, value_enum, default_value_t = Declare::Exact)]
    pub declare: Declare,
    /// quota: the account's real window: `epoch` (fixed, epoch-aligned), `first-call` (fixed,
    /// from each window's first call) or `sliding`.
    #[arg(long, value_enum, default_value_t = SimWindow::Epoch)]
    pub sim_window: SimWindow,
    /// quota: the account states its limits on every free answer (`sim --state-limits`), not
    /// only on its 429s as OpenRouter does.
    #[arg(long)]
    pub state_limits: bool,
    /// quota: whether the workers learn limits from what the provider states
    /// (`FREEWAY_LEARN_LIMITS`).
    #[arg(long, value_enum, default_value_t = Switch::On)]
    pub learning: Switch,
    /// tenants: instead of the goal's workload (A's backlog of 500, then B–E's 5 each), two
    /// tenants of tiers weighing 4 and 1 each enqueue 100 runs at once.
    #[arg(long)]
    pub weights: bool,
    /// tenants: the priority of the backlog's runs (A's, or both tenants' with `--weights`);
    /// B–E's runs are interactive.
    #[arg(long, value_enum, default_value_t = BacklogPriority::Batch)]
    pub backlog_priority: BacklogPriority,
    /// tenants: seconds between A's enqueue and B–E's (default: 4 windows).
    #[arg(long, value_name = "S")]
    pub arrive_after_s: Option<f64>,
    /// tenants: the workers (`--worker`) predate fair share (a build of c6cc77a, say): the runs
    /// carry no `tenant`, `tier` or `priority`, which those workers refuse, and the
    /// configuration no `[tiers]`; tenants differ only by their users.
    #[arg(long)]
    pub before_fair_share: bool,
    /// The worker binary to run (default: `worker` next to this binary's folder): an older
    /// build's, to compare two builds on one load.
    #[arg(long, value_name = "PATH")]
    pub worker: Option<PathBuf>,
    /// The workers speak HTTP/2 to the simulator (`FREEWAY_HTTP2=prior-knowledge`), as they do
    /// to hosted providers over TLS: calls share connections. Without it, HTTP/1.1: a connection
    /// a call in flight.
    #[arg(long)]
    pub http2: bool,
    /// The queue names runs are spread over (`FREEWAY_QUEUES`): on a Redis Cluster, lanes of
    /// the queue on different primaries.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub queues: u16,
    /// Give up waiting for a phase after this many seconds.
    #[arg(long, default_value_t = 180, value_parser = clap::value_parser!(u64).range(1..))]
    pub timeout_s: u64,
    /// Use a PostgreSQL store instead of a SQLite file: a fresh database on this server for each
    /// scenario (the URL's user must be allowed to create databases), dropped at the end.
    #[arg(long, value_name = "URL")]
    pub postgres: Option<String>,
    /// Keep each scenario's temp folder (the workers' logs, the store and the quota scenario's
    /// simulator call log, `sim-calls.jsonl`) and say where it is;
    /// with `RUST_LOG=warn,freeway::store=trace` the logs show every batch the store commits.
    #[arg(long)]
    pub keep: bool,
    /// The Redis to use; each scenario works in a fresh namespace and deletes it at the end.
    #[arg(long, env = "REDIS_URL", default_value = "redis://127.0.0.1:6379")]
    pub redis_url: String,
}

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
