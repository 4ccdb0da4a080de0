//! The worker's exit codes (docs/api.md §2) and its one-line error report.

use std::process::ExitCode;

pub(crate) const FAILED: u8 = 1;
pub(crate) const BAD_INPUT: u8 = 2;
pub(crate) const REFUSED: u8 = 75;

/// Print `worker: <message>` on stderr and return `code`.
pub(crate) fn fail(code: u8, message: &str) -> ExitCode {
    eprintln!("worker: {message}");
    ExitCode::from(code)
}

/// A command that runs once: read the settings (exit 2 when they are bad), set up logging, and
/// run `command` on a single-threaded runtime.
pub(crate) fn one_shot<F: std::future::Future<Output = ExitCode>>(
    command: impl FnOnce(freeway::config::Settings) -> F,
) -> ExitCode {
    let settings = match freeway::config::Settings::from_env() {
        Ok(s) => s,
        Err(e) => return fail(BAD_INPUT, &format!("bad configuration: {e}")),
    };
    let _telemetry = match freeway::logging::init(settings.log_format, "freeway-worker") {
        Ok(t) => t,
        Err(e) => return fail(BAD_INPUT, &format!("bad configuration: {e}")),
    };
    match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime.block_on(command(settings)),
        Err(e) => fail(FAILED, &format!("cannot start the runtime: {e}")),
    }
}

/// A start-up failure: 2 for bad configuration, 1 for an unavailable service.
pub(crate) fn start_failed(e: &crate::wiring::StartError) -> ExitCode {
    if e.bad_config {
        fail(BAD_INPUT, &format!("bad configuration: {}", e.message))
    } else {
        fail(FAILED, &e.message)
    }
}
