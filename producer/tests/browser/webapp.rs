//! The example web apps, the Rust one (`producer/examples/webapp.rs`) and the TypeScript one
//! (`examples/webapp-ts/`, built here against this build's OpenAPI document), each in a real
//! browser with the same script: a fleet (the
//! simulator, `producer serve` with `FREEWAY_SECRET_KEY` and the app's origin in
//! `FREEWAY_CORS_ORIGINS`, one worker) and the app's process, which reaches freeway at
//! `127.0.0.1` and hands the browser events URLs on a public name only the browser resolves;
//! `tests/browser/webapp.mjs` asks questions in the page and checks the answers streamed through
//! the runs' `events_url`s, with no API token in the page or on any of its requests, a delayed
//! run's countdown, one stream at a time, and the messages for refused streams and questions.
//! Each app's settings are checked without a browser.

use crate::common;

use common::browser;
use common::fleet::{ADMIN_TOKEN, API_TOKEN, Fleet, Logging, free_port};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

/// A free model the workers' canary never calls, so the faults the script injects for it strike
/// the app's runs alone.
const MODEL: &str = "meta-llama/llama-3.3-70b-instruct:free";
/// The scenario waits on two stalled runs (8 s and 6 s) besides its set-up.
const SCRIPT_TIMEOUT: Duration = Duration::from_secs(180);

/// The two example web apps, one page and one contract: the Rust one
/// (`producer/examples/webapp.rs`) and the TypeScript one (`examples/webapp-ts/`), whose client
/// is generated from freeway's OpenAPI document when it is built.
#[derive(Clone, Copy, Debug)]
enum WebApp {
    Rust,
    TypeScript,
}

impl WebApp {
    /// The command that starts the app, built from its current source.
    fn command(self) -> std::process::Command {
        match self {
            WebApp::Rust => std::process::Command::new(rust_bin()),
            WebApp::TypeScript => {
                let mut node = std::process::Command::new("node");
                node.arg(typescript_build());
                node
            }
        }
    }

    /// Whether the app can be built here; under CI it must be.
    fn available(self) -> bool {
        match self {
            WebApp::Rust => true,
            WebApp::TypeScript => {
                let modules = ts_dir().join("node_modules/openapi-fetch");
                if modules.exists() {
                    return true;
                }
                crate::common::skip::skipped(
                    "the TypeScript web app's packages",
                    &format!(
                        "{} is missing (npm ci in examples/webapp-ts)",
                        modules.display()
                    ),
                );
                false
            }
        }
    }
}

fn rust_bin() -> PathBuf {
    let bin = Path::new(env!("CARGO_BIN_EXE_producer"))
        .parent()
        .map(|d| d.join("examples/webapp"))
        .expect("the binaries' folder");
    assert!(
        bin.exists(),
        "{} is missing: `cargo test -p producer` builds examples",
        bin.display()
    );
    // `cargo test --test browser` builds no example: an old build would pass for the code,
    // or for the page and the settings' text it includes.
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    for source in [
        manifest.join("examples/webapp.rs"),
        manifest.join("../examples/webapp/page.html"),
        manifest.join("../examples/webapp/usage.txt"),
    ] {
        if let (Some(built), Some(written)) = (modified(&bin), modified(&source)) {
            assert!(
                built >= written,
                "{} is older than {}: `cargo build -p producer --examples`",
                bin.display(),
                source.display()
            );
        }
    }
    bin
}

fn ts_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/webapp-ts")
}

/// Build the TypeScript app against this build's OpenAPI document, once per test process: its
/// client's types are generated from `producer openapi` and the server compiled with them, so
/// a document the app's calls no longer fit fails here.
fn typescript_build() -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            let out = std::process::Command::new("node")
                .arg("build.mjs")
                .current_dir(ts_dir())
                .env("FREEWAY_PRODUCER", env!("CARGO_BIN_EXE_producer"))
                .output()
                .expect("node runs the build");
            assert!(
                out.status.success(),
                "examples/webapp-ts does not build: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            ts_dir().join("dist/server.js")
        })
        .clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_example_web_app_streams_an_answer_to_the_browser_without_the_api_token() {
    streams_an_answer_without_the_api_token(WebApp::Rust).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_typescript_web_app_streams_an_answer_to_the_browser_without_the_api_token() {
    streams_an_answer_without_the_api_token(WebApp::TypeScript).await;
}

async fn streams_an_answer_without_the_api_token(webapp: WebApp) {
    if !browser::available("browser::webapp") || !webapp.available() {
        return;
    }
    let port = free_port();
    let app_url = format!("http://127.0.0.1:{port}");
    let origin = app_url.clone();
    let Some(fleet) = Fleet::start_with(
        "webapp",
        sim::SimConfig::default(),
        1,
        Logging::default(),
        |_| vec![("FREEWAY_CORS_ORIGINS".into(), origin)],
    )
    .await
    else {
        return;
    };
    let public_url = fleet.base.replace("127.0.0.1", "freeway.test");
    let log = fleet.dir.join("webapp.log");
    let mut app = tokio::process::Command::from(webapp.command())
        .arg(format!("127.0.0.1:{port}"))
        .env("FREEWAY_URL", &fleet.base)
        .env("FREEWAY_PUBLIC_URL", &public_url)
        .env("FREEWAY_API_TOKEN", API_TOKEN)
        .env("FREEWAY_PROVIDER", "openrouter")
        .env("FREEWAY_MODEL", MODEL)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("the app's log"))
        .kill_on_drop(true)
        .spawn()
        .expect("the web app starts");
    let http = reqwest::Client::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while http.get(&app_url).send().await.is_err() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the web app did not answer: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let sim_url = fleet.sim.base_url().trim_end_matches("/api/v1").to_string();
    let env = [
        ("APP_URL", app_url),
        ("FREEWAY_URL", fleet.base.clone()),
        ("FREEWAY_PUBLIC_URL", public_url),
        ("API_TOKEN", API_TOKEN.to_string()),
        ("ADMIN_TOKEN", ADMIN_TOKEN.to_string()),
        ("SIM_URL", sim_url),
        ("MODEL", MODEL.to_string()),
    ];
    browser::run("webapp.mjs", &env, SCRIPT_TIMEOUT, || {
        format!(
            "--- producer log ---\n{}\n--- worker-0 log ---\n{}\n--- webapp log ---\n{}",
            fleet.log_of("producer"),
            fleet.log_of("worker-0"),
            std::fs::read_to_string(&log).unwrap_or_default()
        )
    })
    .await;
    let _ = app.kill().await;
    let app_log = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        app_log.contains("freeway refused the run (413)"),
        "the {webapp:?} app's server logs the refusal it relayed:\n{app_log}"
    );
    assert!(!app_log.contains(API_TOKEN), "the app logs no token");
}

/// `webapp --help` names every setting; a missing or malformed one is one line and exit 2.
#[test]
fn the_example_web_app_says_what_its_settings_are_and_what_is_wrong_with_them() {
    says_what_its_settings_are(WebApp::Rust);
}

#[test]
fn the_typescript_web_app_says_what_its_settings_are_and_what_is_wrong_with_them() {
    if WebApp::TypeScript.available() {
        says_what_its_settings_are(WebApp::TypeScript);
    }
}

fn says_what_its_settings_are(webapp: WebApp) {
    let run = |args: &[&str], env: &[(&str, &str)]| {
        let out = webapp
            .command()
            .args(args)
            .env_remove("FREEWAY_URL")
            .env_remove("FREEWAY_PUBLIC_URL")
            .env_remove("FREEWAY_API_TOKEN")
            .env_remove("FREEWAY_PROVIDER")
            .env_remove("FREEWAY_MODEL")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .output()
            .expect("the web app runs");
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        (out.status.code(), text(&out.stdout), text(&out.stderr))
    };
    let (code, help, _) = run(&["--help"], &[]);
    assert_eq!(code, Some(0));
    for setting in [
        "FREEWAY_URL",
        "FREEWAY_PUBLIC_URL",
        "FREEWAY_API_TOKEN",
        "FREEWAY_PROVIDER",
        "FREEWAY_MODEL",
        "FREEWAY_CORS_ORIGINS",
    ] {
        assert!(help.contains(setting), "--help names {setting}:\n{help}");
    }
    let good = [
        ("FREEWAY_URL", "http://127.0.0.1:9"),
        ("FREEWAY_API_TOKEN", "t"),
    ];
    let refused = |args: &[&str], env: &[(&str, &str)], says: &str| {
        let (code, _, stderr) = run(args, env);
        assert_eq!(code, Some(2), "{args:?} {env:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?} {env:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    };
    refused(&[], &good[1..], "FREEWAY_URL is not set");
    refused(&[], &good[..1], "FREEWAY_API_TOKEN is not set");
    let public = [&good[..], &[("FREEWAY_PUBLIC_URL", "freeway.example")]].concat();
    refused(
        &[],
        &public,
        "FREEWAY_PUBLIC_URL must be an http(s) base URL",
    );
    let provider = [&good[..], &[("FREEWAY_PROVIDER", "Open Router")]].concat();
    refused(&[], &provider, "FREEWAY_PROVIDER must be a provider's name");
    refused(&["3000"], &good, "ADDR must be HOST:PORT");
}
