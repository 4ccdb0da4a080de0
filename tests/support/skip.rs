//! The one rule for a test whose service is missing (docs/contributing.md), shared by every
//! crate's tests (the producer's and the worker's include this file by path): on a machine
//! without Redis, PostgreSQL, Chromium or the like, the test returns early and its module says
//! so once a service on stderr, so that `cargo test --workspace` passes there; under `CI`
//! (where `scripts/test.sh` provides every service) the same test fails instead.

use freeway::connect::RedisConnection;

/// The test Redis: `REDIS_URL`, else a local default.
pub(crate) fn redis_url() -> String {
    std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_string())
}

/// A connection to the test Redis; `None`, said by [`skipped`], when none answers there.
pub(crate) async fn redis() -> Option<RedisConnection> {
    redis_at(&redis_url()).await
}

/// A connection to the Redis at `url`; `None`, said by [`skipped`], when none answers there.
pub(crate) async fn redis_at(url: &str) -> Option<RedisConnection> {
    match freeway::connect::redis(url).await {
        Ok(conn) => Some(conn),
        Err(error) => {
            skipped("Redis", &format!("none answers at {url} ({error})"));
            None
        }
    }
}

/// The running test lacks `service` (`why` says how): it skips, and its module says so once a
/// service. Under `CI` this fails the test instead: CI must run it.
pub(crate) fn skipped(service: &str, why: &str) {
    assert!(
        std::env::var_os("CI").is_none(),
        "CI must run this test, but {why}"
    );
    // libtest names a test's thread after the test (`module::…::name`): the binary and its
    // module are the suite that skips.
    let binary = std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.file_stem()?.to_str()?.to_string()))
        .map(|stem| match stem.rsplit_once('-') {
            Some((name, _)) => name.to_string(),
            None => stem,
        })
        .unwrap_or_default();
    let module = std::thread::current()
        .name()
        .and_then(|test| test.split_once("::"))
        .map(|(module, _)| module.to_string());
    let suite = match module {
        Some(module) => format!("{binary}::{module}"),
        None => binary,
    };
    static SAID: std::sync::Mutex<Vec<(String, String)>> = std::sync::Mutex::new(Vec::new());
    let mut said = SAID.lock().unwrap_or_else(|e| e.into_inner());
    let key = (suite.clone(), service.to_string());
    if said.contains(&key) {
        return;
    }
    said.push(key);
    use std::io::Write;
    let _ = writeln!(
        std::io::stderr(),
        "\nskipped: the tests of {suite} that need {service}: {why}; scripts/test.sh provides it\n"
    );
}
