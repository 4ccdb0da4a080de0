//! What `load` is asked to do: its command line, the scenarios and their knobs, and the error
//! type every scenario returns. Each scenario reads these; none reads `main.rs`.

use clap::{Parser, ValueEnum};
use std::path::PathBuf;

pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Chain {
    FreePaid,
    Free,
    /// [free A, Groq, Gemini, paid] (on_rest refuse) over four free tiers of different shapes:
    /// the account's R a window, Groq 30 a minute, Gemini 10 a minute and 25 a Pacific day.
    Providers,
}

/// quota: what the pool configuration tells freeway of the account's limits.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Declare {
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
pub(crate) enum SimWindow {
    /// Fixed, at multiples of the window since the epoch (as OpenRouter's minute).
    Epoch,
    /// Fixed, from the first call of each window.
    FirstCall,
    /// At most R calls in any interval of the window's length.
    Sliding,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Switch {
    On,
    Off,
}

/// tenants: the priority of the backlogged tenants' runs.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum BacklogPriority {
    Batch,
    Interactive,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Scenario {
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
    /// Fair share between tenants on one free account (docs/design.md §4.7).
    Tenants,
    /// 20 tenants at a daily spend cap racing for a priced model (docs/design.md §4.8).
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
pub(crate) struct Args {
    /// Which scenario to run.
    #[arg(long, value_enum, default_value_t = Scenario::Both)]
    pub scenario: Scenario,
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
    /// sends runs to the paid model), `free` ([free A, free B], on_rest queue: runs wait) or
    /// `providers` ([free A, Groq, Gemini, paid] over four differently shaped free tiers;
    /// `--declare none` declares none of their limits).
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
