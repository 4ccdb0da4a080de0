//! Running a script of `tests/browser/` in headless Chromium (Debian's `chromium`, driven by
//! playwright-core). `scripts/test.sh` installs both (`ensure_browser`); without them a browser
//! test is skipped loudly, except under CI (`CI` set), where a missing browser fails the test
//! rather than hiding a broken page.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

pub(crate) fn browser_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/browser")
}

pub(crate) fn chromium() -> PathBuf {
    std::env::var_os("CHROMIUM").map_or_else(|| PathBuf::from("/usr/bin/chromium"), PathBuf::from)
}

/// What is missing to run the browser, if anything.
fn missing_prerequisites() -> Vec<String> {
    let mut missing = Vec::new();
    if !chromium().exists() {
        missing.push(format!("chromium ({})", chromium().display()));
    }
    let node = std::process::Command::new("node")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    if !node.is_ok_and(|s| s.success()) {
        missing.push("node".into());
    }
    if !browser_dir().join("node_modules/playwright-core").exists() {
        missing.push("playwright-core (npm ci in tests/browser)".into());
    }
    missing
}

/// Whether the browser can run; `false` when a machine lacks it, as [`super::skip`] says
/// (`test` names the suite in the line).
pub(crate) fn available(test: &str) -> bool {
    let missing = missing_prerequisites();
    if missing.is_empty() {
        return true;
    }
    super::skip::skipped(
        "a browser",
        &format!("{test} finds these missing: {}", missing.join(", ")),
    );
    false
}

/// Run `script` with `env` within `timeout`; its stdout, or a panic with both outputs and
/// `context` (the fleet's logs) when it fails.
pub(crate) async fn run(
    script: &str,
    env: &[(&str, String)],
    timeout: Duration,
    context: impl Fn() -> String,
) -> String {
    let run = tokio::process::Command::new("node")
        .arg(browser_dir().join(script))
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .env("CHROMIUM", chromium())
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(timeout, run)
        .await
        .unwrap_or_else(|_| panic!("{script} ran longer than {timeout:?}"))
        .expect("node runs");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    eprintln!("{stdout}");
    assert!(
        output.status.success(),
        "{script} failed ({}):\n{stdout}\n{stderr}\n{}",
        output.status,
        context()
    );
    stdout
}
