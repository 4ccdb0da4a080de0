//! The commands of the `producer` binary, and what they share: exit codes and connecting to
//! Redis and the store with one clear line on failure.

pub(crate) mod enqueue;
pub(crate) mod listen;
pub(crate) mod serve;
pub(crate) mod status;

use freeway::config::Settings;
use freeway::fleet::RedisFleet;
use freeway::store::{SqlStore, StoreError};
use std::process::ExitCode;

pub(crate) const EXIT_FAILED: u8 = 1;
pub(crate) const EXIT_BAD_INPUT: u8 = 2;
pub(crate) const EXIT_REFUSED: u8 = 75;

/// Print `producer: <message>` on stderr and give the exit code.
pub(crate) fn fail(code: u8, message: &str) -> ExitCode {
    eprintln!("producer: {message}");
    ExitCode::from(code)
}

/// `producer openapi`: the document `GET /openapi.json` serves, on stdout.
pub(crate) fn print_openapi() -> ExitCode {
    match serde_json::to_string_pretty(producer::api::openapi::spec()) {
        Ok(document) => {
            println!("{document}");
            ExitCode::SUCCESS
        }
        Err(e) => fail(EXIT_FAILED, &format!("cannot write the document: {e}")),
    }
}

/// Open the store of `DATABASE_URL` (a malformed URL is bad configuration: exit 2).
pub(crate) async fn open_store(settings: &Settings) -> Result<SqlStore, ExitCode> {
    SqlStore::open(&settings.database_url)
        .await
        .map_err(|e| match e {
            StoreError::BadUrl(_) => fail(EXIT_BAD_INPUT, &format!("bad configuration: {e}")),
            _ => fail(EXIT_FAILED, &e.to_string()),
        })
}

/// Connect to `REDIS_URL`: the process's one handle on the fleet's state, in its namespace,
/// keeping run events as configured.
pub(crate) async fn connect_fleet(settings: &Settings) -> Result<RedisFleet, ExitCode> {
    let conn = freeway::connect::redis(&settings.redis_url)
        .await
        .map_err(|e| fail(EXIT_FAILED, &e.to_string()))?;
    Ok(RedisFleet::new(conn, &settings.namespace).keeping_events(settings.events_keep_s))
}
