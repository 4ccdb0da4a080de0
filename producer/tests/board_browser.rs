//! The job board in a real browser: starts a fleet (the simulator, `producer serve`, two worker
//! replicas, Redis from `REDIS_URL`), stores 1,000 failed runs, and runs
//! `tests/browser/board.mjs`, which drives `/board` in headless Chromium through playwright-core:
//! sign-in before anything of the dashboard shows, the status tabs and paging through the 1,000
//! failed runs, a run opened by keyboard, a rest counting down, the pools panel's use rising, a
//! delayed run cancelled, a failed run retried into a success, the clear waking the run it
//! delayed within 2 s, no Clear or actions for a viewer, the phone layout within 390 px, badge
//! contrast, and screenshots in light and dark at desktop and phone width under `target/`.
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
const PAID: &str = "openai/gpt-4o-mini";
/// The scenario waits up to about two windows for the delayed run; the rest is set-up.
const SCRIPT_TIMEOUT: Duration = Duration::from_secs(300);
/// Failed runs stored before the page opens, to filter and page through.
const SEEDED_FAILED: usize = 1_000;

/// Store `n` failed runs of old users, a millisecond apart, as a burst long past would leave.
async fn seed_failed_runs(db_url: &str, n: usize) {
    use freeway::store::Store;
    let store = freeway::store::SqlStore::open(db_url)
        .await
        .expect("the store");
    let now = freeway::clock::epoch_ms();
    for i in 0..n {
        let request = freeway::job::RunRequest::from_json(
            format!(
                r#"{{"user_id":"seed{}","input":"old","routes":[{{"model":"{PAID}"}}]}}"#,
                i % 7
            )
            .as_bytes(),
            &freeway::catalog::Catalog::builtin(),
        )
        .expect("a request");
        let job = freeway::job::RunJob::new(request, now - 3_600_000 + i as u64);
        let mut rec = freeway::run::RunRecord::queued(&job, job.enqueued_ms);
        rec.status = freeway::run::RunStatus::Failed;
        rec.code = Some(freeway::run::Code::RoutesExhausted);
        store.save_run(&rec).await.expect("a seeded run");
    }
    store.close().await;
}

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
    seed_failed_runs(&fleet.db_url, SEEDED_FAILED).await;
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
        .env("SEEDED_FAILED", SEEDED_FAILED.to_string())
        .env("PAID_MODEL", PAID)
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
    // A, B and the retry of D succeeded; C was cancelled; D and the seeded runs failed.
    let runs = |series: &str| sample(&metrics, series);
    assert_eq!(
        runs("freeway_runs{status=\"succeeded\",code=\"\"}"),
        Some(3.0),
        "{metrics}"
    );
    assert_eq!(
        runs("freeway_runs{status=\"cancelled\",code=\"\"}"),
        Some(1.0),
        "{metrics}"
    );
    for name in ["desktop-light", "desktop-dark", "phone-light", "phone-dark"] {
        let png = std::fs::read(target_dir().join(format!("board-{name}.png"))).expect(name);
        assert!(png.starts_with(b"\x89PNG"), "{name} is a PNG");
    }
    let log = fleet.log_of("producer");
    for action in ["run cancelled", "run retried"] {
        assert!(
            log.lines()
                .any(|l| l.contains(action) && l.contains("admin token")),
            "{action} is logged with who asked:\n{log}"
        );
    }
}
