//! The `sim` binary: the simulator as a process, for the demo and for scripts.
//!
//! Prints `sim listening on http://ADDR` once bound (scripts wait for that line), logs to
//! stderr, stops gracefully on SIGINT/SIGTERM. A bad setting is one line on stderr and exit 2.

use std::io::IsTerminal;
use std::net::SocketAddr;
use std::process::ExitCode;

use clap::Parser;
use clap::error::ErrorKind;
use sim::{Mode, ModelPrice, Shape, SimConfig, UsageCost, WindowAlign, WindowKind};
use tracing_subscriber::EnvFilter;

#[derive(Debug, Parser)]
#[command(
    name = "sim",
    version,
    about = "A local OpenRouter-compatible simulator: shared free quota, faults, call log",
    after_help = sim::USAGE
)]
struct Cli {
    /// Address to listen on (port 0 picks a free port)
    #[arg(long, env = "SIM_ADDR", default_value = "127.0.0.1:8090")]
    addr: SocketAddr,
    /// Free-model requests per window and per key
    #[arg(long, env = "SIM_RPM", default_value_t = 20, value_name = "N")]
    rpm: u32,
    /// Free-model requests per UTC day and per key (without --high-balance)
    #[arg(long, env = "SIM_RPD", default_value_t = 50, value_name = "N")]
    rpd: u32,
    /// Length of the per-minute window in seconds (1..=86400)
    #[arg(long, env = "SIM_WINDOW_S", default_value_t = 60, value_name = "S")]
    window_s: u64,
    /// Where a fixed window starts: at multiples of --window-s since the epoch, or at a key's
    /// first call (then at its first call after the window ended)
    #[arg(
        long,
        env = "SIM_WINDOW_ALIGN",
        default_value = "epoch",
        value_name = "epoch|first-call"
    )]
    window_align: WindowAlign,
    /// fixed: --rpm calls a window, refused ones included; sliding: at most --rpm calls served
    /// in any --window-s interval
    #[arg(
        long,
        env = "SIM_WINDOW_KIND",
        default_value = "fixed",
        value_name = "fixed|sliding"
    )]
    window_kind: WindowKind,
    /// Free-model answers carry X-RateLimit-Limit/-Remaining/-Reset too (the real OpenRouter
    /// sends them on its 429s only)
    #[arg(long, env = "SIM_STATE_LIMITS")]
    state_limits: bool,
    /// Delay before the response headers of every served chat request
    #[arg(long, env = "SIM_LATENCY_MS", default_value_t = 0, value_name = "MS")]
    latency_ms: u64,
    /// Streamed chunks per second (0 = all at once)
    #[arg(long, env = "SIM_TOKEN_RATE", default_value_t = 0, value_name = "N")]
    token_rate: u32,
    /// Error body generation: 2025 (no limit_source/remedy_hint) or 2026
    #[arg(
        long,
        env = "SIM_SHAPE",
        default_value = "2026",
        value_name = "2025|2026"
    )]
    shape: Shape,
    /// The account bought ≥ 10 credits: 1000 free requests a day, the -high-balance 429
    #[arg(long, env = "SIM_HIGH_BALANCE")]
    high_balance: bool,
    /// Groq (/groq/openai/v1): requests per window, per key and model
    #[arg(long, env = "SIM_GROQ_RPM", default_value_t = 30, value_name = "N")]
    groq_rpm: u32,
    /// Groq: requests per day, per key and model (refilled one every day / N)
    #[arg(long, env = "SIM_GROQ_RPD", default_value_t = 1000, value_name = "N")]
    groq_rpd: u32,
    /// Gemini (/gemini/v1beta/openai): requests per minute, per key and model
    #[arg(long, env = "SIM_GEMINI_RPM", default_value_t = 10, value_name = "N")]
    gemini_rpm: u32,
    /// Gemini: requests per day (midnight Pacific), per key and model
    #[arg(long, env = "SIM_GEMINI_RPD", default_value_t = 250, value_name = "N")]
    gemini_rpd: u32,
    /// Generic (/generic/v1): requests per window, per key and model, stated in
    /// x-ratelimit-*-requests (0: no limit)
    #[arg(long, env = "SIM_GENERIC_RPM", default_value_t = 0, value_name = "N")]
    generic_rpm: u32,
    /// Provider imitated on the unprefixed paths (/v1, /openai/v1): openrouter or groq
    #[arg(
        long,
        env = "SIM_MODE",
        default_value = "openrouter",
        value_name = "openrouter|groq"
    )]
    mode: Mode,
    /// ": OPENROUTER PROCESSING" comments before the first streamed chunk
    #[arg(
        long,
        env = "SIM_KEEPALIVE_COMMENTS",
        default_value_t = 2,
        value_name = "N"
    )]
    keepalive_comments: u32,
    /// When OpenRouter answers carry usage.cost: asked (with "usage": {"include": true}) or
    /// always
    #[arg(
        long,
        env = "SIM_USAGE_COST",
        default_value = "asked",
        value_name = "asked|always"
    )]
    usage_cost: UsageCost,
    /// A paid model's price in USD per million input and output tokens (repeatable; * sets
    /// the default, 0.1/0.4)
    #[arg(
        long = "price",
        env = "SIM_PRICES",
        value_delimiter = ',',
        value_name = "MODEL=IN/OUT"
    )]
    prices: Vec<ModelPrice>,
    /// Write a FREEWAY_CONFIG naming this simulator's providers to FILE once it listens
    #[arg(long, value_name = "FILE")]
    freeway_config: Option<std::path::PathBuf>,
    /// Call-log capacity (oldest records dropped beyond it)
    #[arg(
        long,
        env = "SIM_LOG_CAP",
        default_value_t = 1_000_000,
        value_name = "N"
    )]
    log_cap: usize,
}

impl Cli {
    fn config(&self) -> SimConfig {
        SimConfig {
            rpm: self.rpm,
            rpd: self.rpd,
            window_s: self.window_s,
            window_align: self.window_align,
            window_kind: self.window_kind,
            state_limits: self.state_limits,
            latency_ms: self.latency_ms,
            token_rate: self.token_rate,
            shape: self.shape,
            high_balance: self.high_balance,
            mode: self.mode,
            groq_rpm: self.groq_rpm,
            groq_rpd: self.groq_rpd,
            gemini_rpm: self.gemini_rpm,
            gemini_rpd: self.gemini_rpd,
            generic_rpm: self.generic_rpm,
            keepalive_comments: self.keepalive_comments,
            usage_cost: self.usage_cost,
            log_cap: self.log_cap,
        }
    }
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) => {
            print!("{e}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            // clap's report ends with a usage hint over several lines; scripts want one line.
            let rendered = e.render().to_string();
            eprintln!(
                "{}",
                rendered.lines().next().unwrap_or("error: bad arguments")
            );
            return ExitCode::from(2);
        }
    };
    let config = cli.config();
    if let Err(message) = config.validate() {
        eprintln!("error: {message}");
        return ExitCode::from(2);
    }

    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .init();

    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(run(cli.addr, config, &cli.prices, cli.freeway_config))
}

async fn run(
    addr: SocketAddr,
    config: SimConfig,
    prices: &[ModelPrice],
    freeway_config: Option<std::path::PathBuf>,
) -> ExitCode {
    let handle = match sim::start(config, addr).await {
        Ok(h) => h,
        Err(e) => {
            eprintln!("error: cannot listen on {addr}: {e}");
            return ExitCode::FAILURE;
        }
    };
    // Each price was checked as the flag was parsed; the set can only be refused as a whole
    // for a reason the parse already rules out, which is still reported, not ignored.
    if let Err(message) = handle.set_prices(prices) {
        eprintln!("error: {message}");
        return ExitCode::from(2);
    }
    if let Some(path) = freeway_config
        && let Err(e) = std::fs::write(&path, handle.freeway_config())
    {
        eprintln!("error: cannot write {}: {e}", path.display());
        return ExitCode::FAILURE;
    }
    println!("sim listening on http://{}", handle.addr);
    shutdown_signal().await;
    tracing::info!("shutting down");
    handle.shutdown().await;
    ExitCode::SUCCESS
}

async fn shutdown_signal() {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(e) => {
                tracing::warn!("SIGTERM handler not installed: {e}");
                std::future::pending::<()>().await;
            }
        }
    };
    let interrupt = async {
        if let Err(e) = tokio::signal::ctrl_c().await {
            tracing::warn!("SIGINT handler not installed: {e}");
            std::future::pending::<()>().await;
        }
    };
    tokio::select! {
        () = interrupt => {}
        () = terminate => {}
    }
}
