//! Log set-up (the worker's, duplicated until it moves to the core): `RUST_LOG` filters,
//! `FREEWAY_LOG_FORMAT` picks JSON or human lines, always on stderr so stdout stays for output.

use freeway::config::LogFormat;
use tracing_subscriber::EnvFilter;

/// `default` is the filter when `RUST_LOG` is unset: `info` for the server, `warn` for commands
/// whose stderr is a progress display.
pub fn init(format: LogFormat, default: &str) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Json => builder.json().try_init(),
        LogFormat::Pretty => builder.try_init(),
    };
}
