//! `producer`: the HTTP API (`serve`), and `enqueue` / `status` for people and scripts
//! (docs/api.md §2). All configuration comes from the environment (docs/api.md §3); bad
//! configuration is one line on stderr and exit 2.

mod cli;

use clap::{Parser, Subcommand};
use freeway::logging;
use std::net::SocketAddr;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "producer",
    version,
    about = "freeway producer: the HTTP API that enqueues LLM runs, and an enqueue CLI",
    after_help = "Environment: REDIS_URL (redis+cluster:// for a cluster), FREEWAY_REDIS_CLUSTER, FREEWAY_QUEUES, DATABASE_URL, FREEWAY_NAMESPACE, FREEWAY_API_TOKEN, \
                  FREEWAY_ADMIN_TOKEN, FREEWAY_METRICS_TOKEN, FREEWAY_MAX_STREAMS, FREEWAY_RATE_LIMIT, \
                  FREEWAY_SECRET_KEY, RUST_LOG, FREEWAY_LOG_FORMAT"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the HTTP API. Without FREEWAY_API_TOKEN it listens only on a loopback address.
    Serve {
        /// The address to listen on, IP:PORT.
        #[arg(long, default_value = "127.0.0.1:8080")]
        addr: SocketAddr,
    },
    /// Enqueue one run, with the same pre-flight as POST /v1/runs, and print its id. Exit 0
    /// enqueued (or succeeded with --wait), 1 failed, 2 bad input, 75 refused (the retry delay is
    /// printed).
    // Boxed: its flags make it many times the size of the other commands.
    Enqueue(Box<cli::enqueue::Args>),
    /// Print a run as JSON (the body of GET /v1/runs/{id}).
    Status { run_id: String },
    /// Print the API's OpenAPI 3.1 document (what GET /openapi.json serves), for generating a
    /// client without a running server.
    Openapi,
}

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let settings = match freeway::config::Settings::from_env() {
        Ok(s) => s,
        Err(e) => return cli::fail(cli::EXIT_BAD_INPUT, &format!("bad configuration: {e}")),
    };
    let default_filter = match cli.command {
        Command::Serve { .. } => "info",
        _ => "warn",
    };
    let _telemetry =
        match logging::init_with_default(settings.log_format, default_filter, "freeway-producer") {
            Ok(t) => t,
            Err(e) => return cli::fail(cli::EXIT_BAD_INPUT, &format!("bad configuration: {e}")),
        };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => return cli::fail(cli::EXIT_FAILED, &format!("cannot start the runtime: {e}")),
    };
    runtime.block_on(async move {
        match cli.command {
            Command::Serve { addr } => cli::serve::run(settings, addr).await,
            Command::Enqueue(args) => cli::enqueue::run(settings, *args).await,
            Command::Status { run_id } => cli::status::run(settings, &run_id).await,
            Command::Openapi => cli::print_openapi(),
        }
    })
}
