//! Log set-up shared by the worker's commands: `RUST_LOG` filters, `FREEWAY_LOG_FORMAT` picks
//! JSON or human lines, always on stderr so stdout stays machine-readable.

use freeway::config::LogFormat;
use tracing_subscriber::EnvFilter;

pub fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Json => builder.json().try_init(),
        LogFormat::Pretty => builder.try_init(),
    };
}
