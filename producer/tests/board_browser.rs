//! The job board in a real browser (issue 6): starts a fleet (the simulator, `producer serve`,
//! two worker replicas, Redis from `REDIS_URL`) and runs `tests/browser/board.mjs`, which drives
//! `/board` in headless Chromium through playwright-core. It checks a rest appearing with a
//! countdown that goes down, a delayed run completing, runs' attempt logs, and the clear button
//! failing for a viewer and working for the operator; it saves a screenshot of the board during
//! the rest as `target/board-during-rest.png`.
//!
//! Chromium (Debian's `chromium`), node and the script's `npm ci` are installed by
//! `scripts/test.sh` (`ensure_browser`). Without them the test is skipped loudly, except under CI
//! (`CI` set), where a missing browser fails the test rather than hiding a broken board.

mod common;

use common::fleet::{ADMIN_TOKEN, API_TOKEN, Fleet, Logging, sample, target_dir};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

/// One free call per window: the second run of a window earns the 429 that rests the pool.
const WINDOW_S: u64 = 25;
const FREE: &str = "meta-llama/llama-3.3-70b-instruct:free";
/// The scenario waits up to about two windows for the delayed run; the rest is set-up.
const SCRIPT_TIMEOUT: Duration = Duration::from_secs(240);

fn browser_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/browser")
}

fn chromium() -> PathBuf {
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_board_shows_a_rest_counting_down_attempt_logs_and_an_operator_only_clear() {
    let missing = missing_prerequisites();
    if !missing.is_empty() {
        let what = missing.join(", ");
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must run the browser test, but these are missing: {what}"
        );
        eprintln!(
            "\n*** board_browser SKIPPED: missing {what}; scripts/test.sh installs them ***\n"
        );
        return;
    }
    let config = sim::SimConfig {
        rpm: 1,
        rpd: 1000,
        window_s: WINDOW_S,
        ..sim::SimConfig::default()
    };
    let fleet = Fleet::start("board", config, 2, Logging::default()).await;
    let screenshot = target_dir().join("board-during-rest.png");
    let _ = std::fs::remove_file(&screenshot);
    let sim_url = fleet.sim.base_url().trim_end_matches("/api/v1").to_string();
    let script = tokio::process::Command::new("node")
        .arg(browser_dir().join("board.mjs"))
        .env("BOARD_URL", &fleet.base)
        .env("SIM_URL", sim_url)
        .env("API_TOKEN", API_TOKEN)
        .env("ADMIN_TOKEN", ADMIN_TOKEN)
        .env("SIM_WINDOW_S", WINDOW_S.to_string())
        .env("FREE_MODEL", FREE)
        .env("SCREENSHOT", &screenshot)
        .env("CHROMIUM", chromium())
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(SCRIPT_TIMEOUT, script)
        .await
        .unwrap_or_else(|_| panic!("the browser script ran longer than {SCRIPT_TIMEOUT:?}"))
        .expect("node runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    eprintln!("{stdout}");
    assert!(
        output.status.success(),
        "the browser script failed ({}):\n{stdout}\n{stderr}\n--- producer log ---\n{}\n--- worker-0 log ---\n{}",
        output.status,
        fleet.log_of("producer"),
        fleet.log_of("worker-0")
    );

    let png = std::fs::read(&screenshot).expect("the screenshot was saved");
    assert!(png.starts_with(b"\x89PNG"), "a PNG");
    let producer_log = fleet.log_of("producer");
    assert!(
        producer_log.contains("operator clear") && producer_log.contains("admin token"),
        "the operator's clear is logged with the credential used:\n{producer_log}"
    );
    let metrics = fleet.metrics().await;
    assert_eq!(
        sample(
            &metrics,
            "freeway_rests_written_total{scope=\"pool\",verdict=\"account\"}"
        ),
        Some(1.0),
        "{metrics}"
    );
    assert_eq!(
        sample(&metrics, "freeway_runs{status=\"succeeded\",code=\"\"}"),
        Some(2.0),
        "{metrics}"
    );
}
