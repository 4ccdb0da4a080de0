//! The job board in a real browser: starts a fleet (the simulator, `producer serve`, two worker
//! replicas, Redis from `REDIS_URL`), stores 1,000 failed runs, and runs
//! `tests/browser/board.mjs`, which drives `/board` in headless Chromium through playwright-core:
//! sign-in before anything of the dashboard shows, the status tabs and paging through the 1,000
//! failed runs, the filters and the page kept through a reload, a link to a run opened in a new
//! tab after its sign-in, a run opened by keyboard and closed by Escape with the focus kept, rows
//! and tiles named in the accessibility tree, updates paused by the Live toggle and in a hidden
//! tab, "Run now" answered beside its button, a rest counting down, the pools panel's use rising and
//! its runs waiting, the spend by tenant panel listing the day's tenants, a delayed run cancelled, a failed run found by its input and retried into a success by keyboard alone, a tool call approved, the clear
//! waking the run it delayed within 2 s, a spent day shown as closed until midnight, no Clear or
//! actions for a viewer, the phone layout within 390 px, WCAG AA contrast of every text, border
//! and bar and no serious axe-core violation in light and dark at desktop and phone width, and
//! screenshots of each under `target/`. A second test opens the board of a server without an API
//! token (`tests/browser/board_open.mjs`).

use crate::common;

use common::browser;
use common::fleet::{ADMIN_TOKEN, API_TOKEN, Fleet, Logging, sample, target_dir};
use std::time::Duration;

/// One free call per window: the second run of a window earns the 429 that rests the pool.
const WINDOW_S: u64 = 25;
const FREE: &str = "meta-llama/llama-3.3-70b-instruct:free";
const PAID: &str = "openai/gpt-4o-mini";
/// The scenario waits up to about two windows for the delayed run; the rest is set-up.
const SCRIPT_TIMEOUT: Duration = Duration::from_secs(300);
/// Failed runs stored before the page opens, to filter and page through.
const SEEDED_FAILED: usize = 1_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_board_shows_a_rest_counting_down_attempt_logs_and_an_operator_only_clear() {
    if !browser::available("browser::board") {
        return;
    }
    let config = sim::SimConfig {
        rpm: 1,
        rpd: 1000,
        window_s: WINDOW_S,
        ..sim::SimConfig::default()
    };
    let Some(fleet) = Fleet::start("board", config, 2, Logging::default()).await else {
        return;
    };
    fleet.seed_failed_runs(SEEDED_FAILED, PAID).await;
    let screenshot = target_dir().join("board-during-rest.png");
    let _ = std::fs::remove_file(&screenshot);
    let sim_url = fleet.sim.base_url().trim_end_matches("/api/v1").to_string();
    let env = [
        ("BOARD_URL", fleet.base.clone()),
        ("SIM_URL", sim_url),
        ("API_TOKEN", API_TOKEN.to_string()),
        ("ADMIN_TOKEN", ADMIN_TOKEN.to_string()),
        ("SIM_WINDOW_S", WINDOW_S.to_string()),
        ("FREE_MODEL", FREE.to_string()),
        ("SCREENSHOT", screenshot.display().to_string()),
        ("SEEDED_FAILED", SEEDED_FAILED.to_string()),
        ("PAID_MODEL", PAID.to_string()),
    ];
    browser::run("board.mjs", &env, SCRIPT_TIMEOUT, || {
        format!(
            "--- producer log ---\n{}\n--- worker-0 log ---\n{}",
            fleet.log_of("producer"),
            fleet.log_of("worker-0")
        )
    })
    .await;

    let png = std::fs::read(&screenshot).expect("the screenshot was saved");
    assert!(png.starts_with(b"\x89PNG"), "a PNG");

    let rests_written = "freeway_rests_written_total{scope=\"pool\",verdict=\"account\"}";
    // B's window refusal; the spent day shows on the quota endpoint, or else in F's refusal.
    let metrics = fleet.metrics_showing(rests_written, 1.0).await;
    assert!(
        matches!(sample(&metrics, rests_written), Some(n) if n == 1.0 || n == 2.0),
        "{metrics}"
    );
    // F waits for the next day, or (a day refusal's rest being longer than it may wait) was
    // refused as resting.
    let delayed = sample(&metrics, "freeway_runs{status=\"delayed\",code=\"\"}");
    let refused = sample(
        &metrics,
        "freeway_runs{status=\"refused\",code=\"account_resting\"}",
    );
    assert!(
        delayed == Some(1.0) || refused == Some(1.0),
        "F waits or is refused for the day: {metrics}"
    );
    // A, B, the retry of D, E (its part done once answered), E's continuation and the bulk
    // retries of seed3's runs succeeded; C and gus's two runs were cancelled; D and the seeded runs failed.
    let seed3 = (0..SEEDED_FAILED).filter(|i| i % 7 == 3).count() as f64;
    let succeeded = "freeway_runs{status=\"succeeded\",code=\"\"}";
    let metrics = fleet.metrics_showing(succeeded, 5.0 + seed3).await;
    let runs = |series: &str| sample(&metrics, series);
    assert_eq!(runs(succeeded), Some(5.0 + seed3), "{metrics}");
    assert_eq!(
        runs("freeway_runs{status=\"cancelled\",code=\"\"}"),
        Some(3.0),
        "{metrics}"
    );
    for name in ["desktop-light", "desktop-dark", "phone-light", "phone-dark"] {
        let png = std::fs::read(target_dir().join(format!("board-{name}.png"))).expect(name);
        assert!(png.starts_with(b"\x89PNG"), "{name} is a PNG");
    }
    let log = fleet.log_of("producer");
    for action in [
        "clear",
        "pause",
        "cancel",
        "retry",
        "bulk_retry",
        "bulk_cancel",
    ] {
        assert!(
            log.lines().any(|l| l.contains("operator action")
                && l.contains(action)
                && l.contains("admin token")),
            "{action} is logged with who asked:\n{log}"
        );
    }
}

/// A server without an API token (loopback only) shows its board at once, with no sign-in, and
/// again after a reload; the operator signs in with the admin token for the actions
/// (`tests/browser/board_open.mjs`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_without_a_token_shows_its_board_at_once() {
    if !browser::available("browser::board") {
        return;
    }
    let Some(fleet) = Fleet::start_with(
        "board-open",
        sim::SimConfig::default(),
        1,
        Logging::default(),
        |_| vec![("FREEWAY_API_TOKEN".into(), String::new())],
    )
    .await
    else {
        return;
    };
    let run_id = fleet
        .enqueue(serde_json::json!({
            "user_id": "alice", "input": "hello", "routes": [{ "model": PAID }]
        }))
        .await;
    let run = fleet.settled(&run_id, Duration::from_secs(30)).await;
    assert_eq!(run["status"], "succeeded", "{run}");
    let env = [
        ("BOARD_URL", fleet.base.clone()),
        ("ADMIN_TOKEN", ADMIN_TOKEN.to_string()),
        ("RUN_ID", run_id),
    ];
    browser::run("board_open.mjs", &env, SCRIPT_TIMEOUT, || {
        fleet.log_of("producer")
    })
    .await;
}
