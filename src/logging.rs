//! Log set-up for every freeway binary (the producer's commands and the worker's: one set-up to
//! keep right): `RUST_LOG` filters, `FREEWAY_LOG_FORMAT=json` gives one JSON object per line with
//! the current span's fields (a run's `run_id`, an attempt's attempt-log fields), and everything
//! goes to stderr so stdout stays for output.
//!
//! No secret reaches a log: tokens and keys are `ApiKey`s whose `Debug` is redacted, the
//! handlers never log bodies, and the tests grep a whole end-to-end run's logs for the keys.

use crate::config::LogFormat;
use std::io::IsTerminal;
use tracing_subscriber::EnvFilter;

/// Set up logging with `info` when `RUST_LOG` is unset.
pub fn init(format: LogFormat) {
    init_with_default(format, "info");
}

/// `default` is the filter when `RUST_LOG` is unset: `info` for servers, `warn` for commands
/// whose stderr is a progress display.
pub fn init_with_default(format: LogFormat, default: &str) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    // Colours only for a person at a terminal: a log file or collector gets plain text.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        // A log line that cannot be written (the log's disk is full) is lost, not reported with
        // `eprintln!`, which panics on the same failed write and would end the task that logged.
        .log_internal_errors(false)
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Json => builder.json().try_init(),
        LogFormat::Pretty => builder.try_init(),
    };
}
