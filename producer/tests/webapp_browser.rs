//! The example web app (`producer/examples/webapp.rs`) in a real browser: a fleet (the
//! simulator, `producer serve` with `FREEWAY_SECRET_KEY` and the app's origin in
//! `FREEWAY_CORS_ORIGINS`, one worker) and the app's process; `tests/browser/webapp.mjs` asks a
//! question in the page and reads the answer streamed through the run's `events_url`, with no
//! API token in the page or on any of its requests, and checks that a second run's token does
//! not open the first run's stream (403).

mod common;

use common::browser;
use common::fleet::{API_TOKEN, Fleet, Logging, free_port};
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_example_web_app_streams_an_answer_to_the_browser_without_the_api_token() {
    if !browser::available("webapp_browser") {
        return;
    }
    let port = free_port();
    let app_url = format!("http://127.0.0.1:{port}");
    let origin = app_url.clone();
    let fleet = Fleet::start_with(
        "webapp",
        sim::SimConfig::default(),
        1,
        Logging::default(),
        |_| vec![("FREEWAY_CORS_ORIGINS".into(), origin)],
    )
    .await;
    let bin = Path::new(env!("CARGO_BIN_EXE_producer"))
        .parent()
        .map(|d| d.join("examples/webapp"))
        .expect("the binaries' folder");
    assert!(
        bin.exists(),
        "{} is missing: `cargo test -p producer` builds examples",
        bin.display()
    );
    let mut app = tokio::process::Command::new(bin)
        .arg(format!("127.0.0.1:{port}"))
        .env("FREEWAY_URL", &fleet.base)
        .env("FREEWAY_API_TOKEN", API_TOKEN)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("the web app starts");
    let http = reqwest::Client::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while http.get(&app_url).send().await.is_err() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the web app did not answer"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let env = [
        ("APP_URL", app_url),
        ("FREEWAY_URL", fleet.base.clone()),
        ("API_TOKEN", API_TOKEN.to_string()),
    ];
    browser::run("webapp.mjs", &env, Duration::from_secs(120), || {
        format!("--- producer log ---\n{}", fleet.log_of("producer"))
    })
    .await;
    let _ = app.kill().await;
}
