//! `worker`: executes runs. `worker run-one JOB.json` runs one job without the queue;
//! `worker classify` shows how a provider's answer is read (SPEC §3, §5.2).

mod classify_cmd;
mod logging;
mod prune;
mod run_one;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "worker",
    version,
    about = "freeway worker: takes LLM runs from Redis and executes them",
    after_help = "Environment: REDIS_URL, DATABASE_URL, FREEWAY_NAMESPACE, OPENROUTER_API_KEY, \
                  OPENROUTER_BASE_URL, FREEWAY_TOOL_URL, FREEWAY_SUMMARY, FREEWAY_SECRET_KEY, RUST_LOG, \
                  FREEWAY_LOG_FORMAT"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
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
        /// The route that answered: MODEL[@CONNECTION].
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
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Classify { route } => classify(&route),
        Command::RunOne { job } => run_one::main(&job),
        Command::Prune { older_than_days } => prune::main(older_than_days),
    }
}

/// `worker classify`: stdin in, one JSON line out; exit 2 on input it cannot read.
fn classify(route: &str) -> ExitCode {
    use std::io::Read;
    let mut raw = Vec::new();
    if let Err(e) = std::io::stdin().read_to_end(&mut raw) {
        eprintln!("worker classify: cannot read stdin: {e}");
        return ExitCode::from(2);
    }
    match classify_cmd::run(route, &raw, freeway::clock::epoch_ms()) {
        Ok(line) => {
            println!("{line}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("worker classify: {e}");
            ExitCode::from(2)
        }
    }
}
