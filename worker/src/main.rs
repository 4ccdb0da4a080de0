//! `worker`: executes runs. Without a command it takes runs from the queue (docs/design.md §4.3);
//! `worker run-one JOB.json` runs one job without the queue; `worker classify` shows how a
//! provider's answer is read (docs/design.md §3, docs/api.md §2); `worker prune` deletes old
//! finished runs; `worker config check` shows the providers and pools in force. Each command is
//! a file of `cmd/`; this file is the command line.

mod cmd;
mod consume;
mod exit;
mod payload;
mod wiring;

use clap::{Parser, Subcommand};
use cmd::serve::Serve;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "worker",
    version,
    about = "freeway worker: takes LLM runs from Redis and executes them",
    after_help = "Environment: REDIS_URL (redis+cluster:// for a cluster), FREEWAY_REDIS_CLUSTER, FREEWAY_QUEUES, DATABASE_URL, FREEWAY_NAMESPACE, FREEWAY_CONFIG, \
                  OPENROUTER_API_KEY, OPENROUTER_BASE_URL, FREEWAY_HTTP2, FREEWAY_TOOL_URL, FREEWAY_SUMMARY, FREEWAY_SECRET_KEY, FREEWAY_EVENTS_KEEP_S, RUST_LOG, \
                  FREEWAY_LOG_FORMAT"
)]
struct Cli {
    /// Runs executed at once by this replica (runs are I/O-bound).
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u16).range(1..=10_000))]
    concurrency: u16,
    /// Seconds to let running jobs finish after SIGTERM/SIGINT before the rest are released.
    #[arg(long, default_value_t = 30)]
    grace_s: u64,
    /// Seconds between heartbeats; a replica that misses 3 is presumed dead and its runs are
    /// taken over by the others.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=300))]
    heartbeat_s: u64,
    /// Seconds between reconcile rounds (one replica a round): a run the store has as queued,
    /// delayed or running, untouched for two rounds, that Redis no longer knows is pushed again.
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=3600))]
    reconcile_s: u64,
    /// Seconds between reads of each platform pool's quota endpoint (OpenRouter's `/key`; one
    /// replica a read): they resynchronise the pool's day count and limit, and requests left
    /// (credits bought) lift a spent day's rest early.
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=86400))]
    quota_check_s: u64,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Run one job (the body of POST /v1/runs) without the queue; prints each event as a JSON
    /// line. Exit 0 succeeded, 1 failed, 2 bad input, 75 refused.
    RunOne {
        /// The job file; `-` reads stdin.
        job: String,
    },
    /// Classify a raw HTTP response read on stdin (status line, headers, blank line, body) and
    /// print the verdict as one JSON line.
    Classify {
        /// The route that answered: `[PROVIDER:]MODEL[@CONNECTION]`.
        #[arg(long)]
        route: String,
    },
    /// Retention: delete finished runs (succeeded, failed, refused) last updated more than N days
    /// ago, with their attempts and approvals, from the store of DATABASE_URL. Transcripts stay,
    /// except turns a regenerate replaced before then. Prints what was deleted as one JSON line.
    Prune {
        /// Keep everything that finished within this many days.
        #[arg(long)]
        older_than_days: u64,
    },
    /// Key rotation: seal every user connection key that only FREEWAY_SECRET_KEY_PREVIOUS opens
    /// with FREEWAY_SECRET_KEY. Prints what it did as one JSON line; exit 1 when some key opens
    /// with neither.
    ResealKeys,
    /// The providers and pools configuration (FREEWAY_CONFIG over the built-in defaults).
    Config {
        #[command(subcommand)]
        action: ConfigAction,
    },
}

#[derive(Subcommand)]
enum ConfigAction {
    /// Check the configuration and print the effective providers and pools as JSON (which key
    /// variables are set, never a key). Exit 2, with one line naming the key, when it is bad.
    Check,
}

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        None => cmd::serve::main(Serve {
            concurrency: usize::from(cli.concurrency),
            grace: std::time::Duration::from_secs(cli.grace_s),
            heartbeat: std::time::Duration::from_secs(cli.heartbeat_s),
            reconcile: std::time::Duration::from_secs(cli.reconcile_s),
            quota_check: std::time::Duration::from_secs(cli.quota_check_s),
        }),
        Some(Command::Classify { route }) => cmd::classify::main(&route),
        Some(Command::RunOne { job }) => cmd::run_one::main(&job),
        Some(Command::Prune { older_than_days }) => cmd::prune::main(older_than_days),
        Some(Command::ResealKeys) => cmd::reseal::main(),
        Some(Command::Config {
            action: ConfigAction::Check,
        }) => cmd::config::check(),
    }
}
