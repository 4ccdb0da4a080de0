//! The `producer` binary as a real process (docs/api.md §2): `--help`, one-line errors with exit
//! 2 for bad input and configuration, the loopback rule of `serve`, `enqueue` (with `--wait`) and
//! `status` against real Redis and a temporary SQLite store, and a graceful shutdown on SIGTERM
//! that ends open event streams.

use crate::common;

use common::skip::{self, redis_url};
use common::{JsonBody, json_of, run_body, temp_dir, unique};
use freeway::chat::Usage;
use freeway::classify::{RestLength, RestScope};
use freeway::events::{Event, EventSink, RedisEvents};
use freeway::rest::{RedisRests, Rests};
use freeway::run::{Code, RunStatus};
use serde_json::json;
use std::process::{Output, Stdio};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::process::Command;

/// A bound for processes that should end on their own; reaching it fails the test.
const BOUND: Duration = Duration::from_secs(20);

/// Environment of one test: its own namespace and store.
struct Env {
    ns: String,
    db_url: String,
}

impl Env {
    fn new() -> Env {
        let dir = temp_dir("cli");
        Env {
            ns: unique("pcli"),
            db_url: format!("sqlite://{}", dir.join("freeway.db").display()),
        }
    }

    /// [`Env::new`] for a test whose commands need Redis; `None` (said) without one.
    async fn with_redis() -> Option<Env> {
        skip::redis().await?;
        Some(Env::new())
    }

    /// The Redis of an [`Env::with_redis`].
    async fn redis(&self) -> freeway::connect::RedisConnection {
        skip::redis().await.expect("the Redis this test found")
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_producer"));
        cmd.args(args);
        self.environ(cmd)
    }

    /// [`Env::command`] run with a file limit of `nofile` (`prlimit --nofile`).
    fn limited(&self, nofile: u32, args: &[&str]) -> Command {
        let mut cmd = Command::new("prlimit");
        cmd.arg(format!("--nofile={nofile}:{nofile}"))
            .arg("--")
            .arg(env!("CARGO_BIN_EXE_producer"))
            .args(args);
        self.environ(cmd)
    }

    fn environ(&self, mut cmd: Command) -> Command {
        cmd.env("REDIS_URL", redis_url())
            .env("DATABASE_URL", &self.db_url)
            .env("FREEWAY_NAMESPACE", &self.ns)
            .env_remove("FREEWAY_API_TOKEN")
            .env_remove("RUST_LOG")
            .env("RUST_BACKTRACE", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        cmd
    }

    async fn run(&self, args: &[&str]) -> Output {
        let out = self.command(args).output();
        tokio::time::timeout(BOUND, out)
            .await
            .expect("the command ends")
            .expect("the command runs")
    }
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn one_clear_line(out: &Output) -> String {
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        !err.contains("panicked") && !err.contains("RUST_BACKTRACE"),
        "{err}"
    );
    err
}

#[tokio::test]
async fn help_exits_0_for_every_command() {
    let env = Env::new();
    for args in [
        &["--help"][..],
        &["serve", "--help"][..],
        &["enqueue", "--help"][..],
        &["status", "--help"][..],
    ] {
        let out = env.run(args).await;
        assert_eq!(out.status.code(), Some(0), "{args:?}");
        assert!(stdout(&out).contains("Usage"), "{args:?}");
    }
}

#[tokio::test]
async fn serve_refuses_a_public_address_without_an_api_token() {
    let out = Env::new().run(&["serve", "--addr", "0.0.0.0:0"]).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(one_clear_line(&out).contains("FREEWAY_API_TOKEN"));
}

#[tokio::test]
async fn bad_input_and_bad_configuration_exit_2_in_one_line() {
    let env = Env::new();
    let out = env
        .run(&[
            "enqueue", "--user", "bad user", "--input", "hi", "--route", "m",
        ])
        .await;
    assert_eq!(out.status.code(), Some(2));
    assert!(one_clear_line(&out).contains("user_id"));
    let out = env.run(&["enqueue", "--user", "u1", "--input", "hi"]).await;
    assert_eq!(out.status.code(), Some(2), "a route is required");
    let out = env
        .run(&[
            "enqueue", "--user", "u1", "--input", "hi", "--route", "m", "--kind", "poem",
        ])
        .await;
    assert_eq!(out.status.code(), Some(2));
    for (flags, want) in [
        (
            &["--tier", "gold"][..],
            "unknown tier \"gold\"; configured: default",
        ),
        (&["--tenant", "a b"][..], "tenant: must match"),
        (&["--max-usd", "0"][..], "max_usd: must be a number above 0"),
        // JSON would have read NaN as null: no cap at all.
        (
            &["--max-usd", "NaN"][..],
            "max_usd: must be a number above 0",
        ),
        (
            &["--max-usd", "inf"][..],
            "max_usd: must be a number above 0",
        ),
    ] {
        let mut args = vec!["enqueue", "--user", "u1", "--input", "hi", "--route", "m"];
        args.extend_from_slice(flags);
        let out = env.run(&args).await;
        assert_eq!(out.status.code(), Some(2), "{flags:?}");
        let err = one_clear_line(&out);
        assert!(err.contains(want), "{flags:?}: {err}");
    }

    let mut cmd = env.command(&["status", "run_x"]);
    cmd.env("FREEWAY_LOG_FORMAT", "xml");
    let out = cmd.output().await.expect("runs");
    assert_eq!(out.status.code(), Some(2));
    assert!(one_clear_line(&out).contains("FREEWAY_LOG_FORMAT"));
    let mut cmd = env.command(&["status", "run_x"]);
    cmd.env("DATABASE_URL", "mysql://db/x");
    let out = cmd.output().await.expect("runs");
    assert_eq!(out.status.code(), Some(2));
    assert!(one_clear_line(&out).contains("DATABASE_URL"));
}

#[tokio::test]
async fn enqueue_prints_the_run_id_and_status_shows_the_run() {
    let Some(env) = Env::with_redis().await else {
        return;
    };
    let out = env
        .run(&[
            "enqueue",
            "--user",
            "u1",
            "--input",
            "hi",
            "--route",
            "vendor/a",
            "--route",
            "vendor/b:free",
        ])
        .await;
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let run_id = stdout(&out).trim().to_string();
    assert!(run_id.starts_with("run_"), "{run_id}");

    let out = env.run(&["status", &run_id]).await;
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let run: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(run["run_id"], run_id.as_str());
    assert_eq!(run["status"], "queued");
    assert_eq!(run["routes"][1]["model"], "vendor/b:free");
    assert_eq!(
        [
            &run["tenant"],
            &run["tier"],
            &run["priority"],
            &run["max_usd"]
        ],
        [
            &json!("u1"),
            &json!("default"),
            &json!("interactive"),
            &json!(null)
        ]
    );

    let out = env
        .run(&[
            "enqueue",
            "--user",
            "u1",
            "--input",
            "hi",
            "--route",
            "vendor/a",
            "--tenant",
            "org_acme",
            "--tier",
            "default",
            "--priority",
            "batch",
            "--max-usd",
            "0.5",
        ])
        .await;
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let out = env.run(&["status", stdout(&out).trim()]).await;
    let run: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(
        [
            &run["tenant"],
            &run["tier"],
            &run["priority"],
            &run["max_usd"]
        ],
        [
            &json!("org_acme"),
            &json!("default"),
            &json!("batch"),
            &json!(0.5)
        ]
    );

    let out = env.run(&["status", "run_missing"]).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(one_clear_line(&out).contains("not found"));
}

#[tokio::test]
async fn a_refused_enqueue_exits_75_and_prints_the_delay() {
    let Some(env) = Env::with_redis().await else {
        return;
    };
    RedisRests::new(env.redis().await, env.ns.clone())
        .write(
            &RestScope::Pool("openrouter-free".into()),
            RestLength::For(40_000),
            "test rest",
        )
        .await
        .expect("rest written");
    let out = env
        .run(&[
            "enqueue",
            "--user",
            "u1",
            "--input",
            "hi",
            "--route",
            "vendor/m:free",
        ])
        .await;
    assert_eq!(out.status.code(), Some(75));
    let err = one_clear_line(&out);
    assert!(
        err.contains("account_resting") && err.contains("retry in"),
        "{err}"
    );
    assert!(stdout(&out).is_empty());
    // A batch run waits for the pool instead, unless it says refuse.
    let batch = [
        "enqueue",
        "--user",
        "u1",
        "--input",
        "hi",
        "--route",
        "vendor/m:free",
        "--priority",
        "batch",
    ];
    let out = env.run(&batch).await;
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(stdout(&out).starts_with("run_"));
    let out = env
        .run(&[&batch[..], &["--on-rest", "refuse"]].concat())
        .await;
    assert_eq!(out.status.code(), Some(75), "{out:?}");
}

/// `enqueue --wait` started: the process, its stdout after the run id, and the run id.
async fn enqueue_waiting(
    env: &Env,
) -> (
    tokio::process::Child,
    BufReader<tokio::process::ChildStdout>,
    String,
) {
    let mut child = env
        .command(&[
            "enqueue", "--user", "u1", "--input", "hi", "--route", "vendor/m", "--wait",
        ])
        .spawn()
        .expect("spawns");
    let mut out = BufReader::new(child.stdout.take().expect("stdout"));
    let mut first = String::new();
    out.read_line(&mut first).await.expect("the run id");
    let run_id = first.trim().to_string();
    (child, out, run_id)
}

/// `enqueue --wait` while the test plays the worker's events; returns the process output.
async fn wait_for(env: &Env, events: Vec<Event>) -> (String, Output) {
    let (child, mut out, run_id) = enqueue_waiting(env).await;
    let sink = RedisEvents::new(env.redis().await, env.ns.clone());
    for e in &events {
        sink.publish(&run_id, e).await.expect("publish");
    }
    let mut rest = Vec::new();
    out.read_to_end(&mut rest).await.expect("stdout");
    let mut output = tokio::time::timeout(BOUND, child.wait_with_output())
        .await
        .expect("ends after the last event")
        .expect("runs");
    output.stdout = rest;
    (run_id, output)
}

#[tokio::test]
async fn enqueue_wait_streams_the_answer_and_exits_by_how_the_run_ended() {
    let Some(env) = Env::with_redis().await else {
        return;
    };
    let finished = |status: RunStatus, code: Option<Code>| Event::Finished {
        status,
        code,
        usage: Usage::default(),
    };
    let (_, out) = wait_for(
        &env,
        vec![
            Event::Started {
                worker: "w1".into(),
            },
            Event::Attempt {
                n: 1,
                step: 1,
                route: "platform:openrouter/vendor/m".into(),
            },
            Event::Delta {
                text: "Hello".into(),
            },
            Event::Delta {
                text: " world".into(),
            },
            finished(RunStatus::Succeeded, None),
        ],
    )
    .await;
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(stdout(&out), "Hello world\n");
    let progress = String::from_utf8_lossy(&out.stderr);
    assert!(
        progress.contains("[attempt 1 step 1 route platform:openrouter/vendor/m]"),
        "{progress}"
    );
    assert!(progress.contains("[finished: succeeded]"), "{progress}");

    let (_, out) = wait_for(
        &env,
        vec![
            Event::Failover {
                from: "platform:openrouter/vendor/m".into(),
                to: None,
                verdict: freeway::classify::Verdict::Server,
            },
            finished(RunStatus::Failed, Some(Code::RoutesExhausted)),
        ],
    )
    .await;
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("routes_exhausted"));

    let (_, out) = wait_for(
        &env,
        vec![Event::Refused {
            code: Code::DeadlineExceeded,
            retry_after_s: 0,
        }],
    )
    .await;
    assert_eq!(out.status.code(), Some(75), "{out:?}");
}

/// `producer serve` on a free loopback port, with these extra variables; the child and its
/// base URL once it listens.
async fn serve(env: &Env, vars: &[(&str, &str)]) -> (tokio::process::Child, String) {
    serve_as(env.command(&["serve", "--addr", "127.0.0.1:0"]), vars).await
}

async fn serve_as(mut cmd: Command, vars: &[(&str, &str)]) -> (tokio::process::Child, String) {
    cmd.envs(vars.iter().copied());
    common::listening(cmd).await
}

#[tokio::test]
async fn serve_shuts_down_gracefully_on_sigterm_ending_open_event_streams() {
    let Some(env) = Env::with_redis().await else {
        return;
    };
    let (mut child, base) = serve(&env, &[]).await;
    let http = reqwest::Client::new();
    let resp = http
        .get(format!("{base}/healthz"))
        .send()
        .await
        .expect("healthz");
    assert_eq!(resp.status().as_u16(), 200);
    let resp = http
        .post(format!("{base}/v1/runs"))
        .json_body(&run_body("u1", "vendor/m"))
        .send()
        .await
        .expect("POST");
    let run_id = json_of(resp).await["run_id"]
        .as_str()
        .expect("run id")
        .to_string();
    let mut events = http
        .get(format!("{base}/v1/runs/{run_id}/events"))
        .send()
        .await
        .expect("events");
    let first = events
        .chunk()
        .await
        .expect("a chunk")
        .expect("the queued event");
    assert!(String::from_utf8_lossy(&first).contains("event: queued"));

    let pid = child.id().expect("running").to_string();
    let killed = Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .await
        .expect("kill");
    assert!(killed.success());
    let status = tokio::time::timeout(BOUND, child.wait())
        .await
        .expect("the server stops although an event stream was open")
        .expect("exit status");
    assert_eq!(status.code(), Some(0));
    while events.chunk().await.ok().flatten().is_some() {}
}

#[tokio::test]
async fn serve_takes_its_stream_cap_and_metrics_token_from_the_environment() {
    let Some(env) = Env::with_redis().await else {
        return;
    };
    let (_child, base) = serve(
        &env,
        &[
            ("FREEWAY_MAX_STREAMS", "1"),
            ("FREEWAY_METRICS_TOKEN", "metrics-token-7f3a9c21"),
        ],
    )
    .await;
    let http = reqwest::Client::new();
    let metrics = format!("{base}/metrics");
    let resp = http.get(&metrics).send().await.expect("GET");
    assert_eq!(resp.status().as_u16(), 401);
    let resp = http
        .get(&metrics)
        .bearer_auth("metrics-token-7f3a9c21")
        .send()
        .await
        .expect("GET");
    assert_eq!(resp.status().as_u16(), 200);

    let resp = http
        .post(format!("{base}/v1/runs"))
        .json_body(&run_body("u1", "vendor/m"))
        .send()
        .await
        .expect("POST");
    let run_id = json_of(resp).await["run_id"]
        .as_str()
        .expect("run id")
        .to_string();
    let events = format!("{base}/v1/runs/{run_id}/events");
    let first = http.get(&events).send().await.expect("events");
    assert_eq!(first.status().as_u16(), 200);
    let second = http.get(&events).send().await.expect("events");
    assert_eq!(second.status().as_u16(), 503, "one stream at most");
    drop(first);
}

#[tokio::test]
async fn a_stream_cap_that_is_not_a_positive_number_is_bad_configuration() {
    let env = Env::new();
    for bad in ["0", "many", "-1"] {
        let mut cmd = env.command(&["status", "run_x"]);
        cmd.env("FREEWAY_MAX_STREAMS", bad);
        let out = cmd.output().await.expect("runs");
        assert_eq!(out.status.code(), Some(2), "{bad}");
        assert!(
            one_clear_line(&out).contains("FREEWAY_MAX_STREAMS"),
            "{bad}"
        );
    }
}

#[tokio::test]
async fn an_events_keep_outside_a_second_to_a_week_is_bad_configuration() {
    let env = Env::new();
    for bad in ["0", "604801", "1h"] {
        let mut cmd = env.command(&["status", "run_x"]);
        cmd.env("FREEWAY_EVENTS_KEEP_S", bad);
        let out = cmd.output().await.expect("runs");
        assert_eq!(out.status.code(), Some(2), "{bad:?}");
        assert!(
            one_clear_line(&out).contains("FREEWAY_EVENTS_KEEP_S"),
            "{bad:?}"
        );
    }
}

#[tokio::test]
async fn a_bad_configuration_file_stops_every_command_with_one_line() {
    let env = Env::new();
    let dir = temp_dir("cli-config");
    let path = dir.join("freeway.toml");
    std::fs::write(
        &path,
        "[pools.p]\nprovider = \"openrouter\"\nmodels = [\"a{b,c}\"]\n",
    )
    .expect("write");
    for args in [
        &["serve", "--addr", "127.0.0.1:0"][..],
        &["enqueue", "--user", "u1", "--input", "hi", "--route", "x/y"][..],
    ] {
        let mut cmd = env.command(args);
        cmd.env("FREEWAY_CONFIG", &path);
        let out = tokio::time::timeout(BOUND, cmd.output())
            .await
            .expect("the command ends")
            .expect("the command runs");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        assert!(
            err.contains("FREEWAY_CONFIG") && err.contains("pools.p.models"),
            "{err}"
        );
    }
}

/// Tokens and a key that pass the start-up checks (docs/api.md §3: tokens of 16 characters or more,
/// no two alike).
const GOOD_API_TOKEN: &str = "api-token-8c41f0e7b2d95a36";
const GOOD_ADMIN_TOKEN: &str = "admin-token-1e9b07c3f5a4d862";
const GOOD_SECRET_KEY: &str = "c7a1e04f92b6d3580e1f7a2c4b9d6e8305f1a7c2e9b4d60817c3f5a2e8d9b046";

/// A refused start: its environment, what the line must say, and a secret it must not show.
type Refusal<'a> = (&'a [(&'a str, &'a str)], &'a str, &'a str);

#[tokio::test]
async fn serve_refuses_weak_or_shared_secrets_and_overlong_durations_in_one_line() {
    let env = Env::new();
    let dir = temp_dir("cli-weak");
    let long_canary = dir.join("freeway.toml");
    std::fs::write(
        &long_canary,
        "[pools.openrouter-free]\ncanary_every = \"99999999999999d\"\n",
    )
    .expect("write");
    let long_canary = long_canary.to_str().expect("utf-8 path");
    let zero_key = "0".repeat(64);
    let cases: [Refusal<'_>; 5] = [
        (
            &[("FREEWAY_API_TOKEN", "x")],
            "FREEWAY_API_TOKEN: must be at least 16 characters",
            "",
        ),
        (
            &[
                ("FREEWAY_API_TOKEN", GOOD_API_TOKEN),
                ("FREEWAY_ADMIN_TOKEN", "adm-Zq7"),
            ],
            "FREEWAY_ADMIN_TOKEN: must be at least 16 characters",
            "adm-Zq7",
        ),
        (
            &[
                ("FREEWAY_API_TOKEN", GOOD_API_TOKEN),
                ("FREEWAY_ADMIN_TOKEN", GOOD_API_TOKEN),
            ],
            "FREEWAY_ADMIN_TOKEN: must not be the same token as FREEWAY_API_TOKEN",
            GOOD_API_TOKEN,
        ),
        (
            &[("FREEWAY_SECRET_KEY", &zero_key)],
            "FREEWAY_SECRET_KEY: is too weak: all its bytes are the same",
            &zero_key,
        ),
        (
            &[("FREEWAY_CONFIG", long_canary)],
            "pools.openrouter-free.canary_every: \"99999999999999d\" is longer than 365d",
            "",
        ),
    ];
    for (vars, want, secret) in cases {
        let mut cmd = env.command(&["serve", "--addr", "127.0.0.1:0"]);
        cmd.envs(vars.iter().copied());
        let out = tokio::time::timeout(BOUND, cmd.output())
            .await
            .expect("the command ends")
            .expect("the command runs");
        assert_eq!(out.status.code(), Some(2), "{want}: {out:?}");
        let err = one_clear_line(&out);
        assert!(
            err.starts_with("producer: bad configuration: ") && err.contains(want),
            "{want:?} in {err}"
        );
        assert!(
            secret.is_empty() || !err.contains(secret),
            "no secret in {err}"
        );
    }
}

#[tokio::test]
async fn serve_starts_with_long_distinct_tokens_a_strong_key_and_a_yearly_canary() {
    let Some(env) = Env::with_redis().await else {
        return;
    };
    let path = temp_dir("cli-strong").join("freeway.toml");
    std::fs::write(&path, "[pools.openrouter-free]\ncanary_every = \"365d\"\n").expect("write");
    let (_child, base) = serve(
        &env,
        &[
            ("FREEWAY_API_TOKEN", GOOD_API_TOKEN),
            ("FREEWAY_ADMIN_TOKEN", GOOD_ADMIN_TOKEN),
            ("FREEWAY_SECRET_KEY", GOOD_SECRET_KEY),
            ("FREEWAY_CONFIG", path.to_str().expect("utf-8 path")),
        ],
    )
    .await;
    let http = reqwest::Client::new();
    for token in [GOOD_API_TOKEN, GOOD_ADMIN_TOKEN] {
        let resp = http
            .get(format!("{base}/v1/pools"))
            .bearer_auth(token)
            .send()
            .await
            .expect("GET");
        assert_eq!(resp.status().as_u16(), 200);
    }
}

#[tokio::test]
async fn enqueue_wait_counts_a_delay_down_and_tells_a_failed_attempt_in_words() {
    use freeway::store::Store;
    let Some(env) = Env::with_redis().await else {
        return;
    };
    let (mut child, _out, run_id) = enqueue_waiting(&env).await;
    let sink = RedisEvents::new(env.redis().await, env.ns.clone());
    let until_ms = freeway::clock::epoch_ms() + 30_000;
    let delayed = Event::Delayed {
        until_ms,
        reason: "openrouter-free is full".into(),
    };
    sink.publish(&run_id, &delayed).await.expect("publish");
    let mut err = BufReader::new(child.stderr.take().expect("stderr")).lines();
    let mut seen = Vec::new();
    let countdown = tokio::time::timeout(BOUND, async {
        while let Some(line) = err.next_line().await.expect("stderr") {
            seen.push(line.clone());
            if line.starts_with("[waiting: ") {
                return line;
            }
        }
        panic!("no countdown: {seen:?}")
    })
    .await
    .expect("a countdown while nothing happens");
    let left: u64 = countdown
        .trim_start_matches("[waiting: ")
        .split(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .expect("seconds left");
    assert!((25..=30).contains(&left), "{countdown}");

    // The store's record of the failed attempt says what the provider answered.
    let store = freeway::store::SqlStore::open(&env.db_url)
        .await
        .expect("store");
    let attempt = freeway::run::AttemptRecord {
        http_status: Some(502),
        error: Some("upstream connect error".into()),
        verdict: Some(freeway::classify::Verdict::Server),
        ..freeway::run::AttemptRecord::succeeded(
            &run_id,
            1,
            1,
            "platform:openrouter/vendor/m".into(),
            0,
        )
    };
    store.record_attempt(&attempt).await.expect("recorded");
    let failover = Event::Failover {
        from: "platform:openrouter/vendor/m".into(),
        to: None,
        verdict: freeway::classify::Verdict::Server,
    };
    let finished = Event::Finished {
        status: RunStatus::Failed,
        code: Some(Code::RoutesExhausted),
        usage: Usage::default(),
    };
    for e in [&failover, &finished] {
        sink.publish(&run_id, e).await.expect("publish");
    }
    let rest = tokio::time::timeout(BOUND, async {
        let mut lines = Vec::new();
        while let Some(line) = err.next_line().await.expect("stderr") {
            lines.push(line);
        }
        lines
    })
    .await
    .expect("ends after the last event");
    let rest = rest.join("\n");
    assert!(
        rest.contains(
            "[attempt 1 on platform:openrouter/vendor/m: HTTP 502: upstream connect error]"
        ),
        "{rest}"
    );
    assert!(
        rest.contains("[platform:openrouter/vendor/m failed (server): no route is left to try]"),
        "{rest}"
    );
    let status = child.wait().await.expect("exits");
    assert_eq!(status.code(), Some(1));
}

/// Slow clients cannot take the API away. Under a file limit of 160, 150 clients that each send
/// half a request head and wait would have taken every descriptor (the server accepted what it
/// could, and kept it): no request got through while they stayed. Now the server holds at most
/// the file limit less what the process needs, closes a connection whose headers do not come
/// within the header timeout, and a real request is answered while the slow clients are still
/// there.
#[tokio::test]
async fn slow_clients_past_the_file_limit_leave_the_api_reachable() {
    use tokio::io::AsyncWriteExt;
    let Some(env) = Env::with_redis().await else {
        return;
    };
    let (_server, base) =
        serve_as(env.limited(160, &["serve", "--addr", "127.0.0.1:0"]), &[]).await;
    let addr = base.trim_start_matches("http://").to_string();
    let mut slow = Vec::new();
    for _ in 0..150 {
        let mut conn = tokio::net::TcpStream::connect(&addr)
            .await
            .expect("connects");
        conn.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
            .await
            .expect("half a request head");
        slow.push(conn);
    }
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(40))
        .build()
        .expect("a client");
    let took = healthy_in(&http, &base).await;
    eprintln!(
        "slow client probe: /healthz answered in {took:?} behind 150 slow clients at a file limit of 160"
    );
    drop(slow);
}

/// How long `/healthz` took to answer 200.
async fn healthy_in(http: &reqwest::Client, base: &str) -> Duration {
    let started = std::time::Instant::now();
    let resp = http
        .get(format!("{base}/healthz"))
        .send()
        .await
        .expect("answered while the clients hold on");
    assert_eq!(resp.status().as_u16(), 200);
    started.elapsed()
}

/// A client that sends its headers and then trickles its body gets `408 request_timeout` once the
/// body timeout passes, and its connection is closed. (Only the headers had a timeout: a body
/// sent a byte at a time held its connection as long as the client liked.)
#[tokio::test]
async fn a_body_that_does_not_arrive_in_time_is_408_and_the_connection_closes() {
    use tokio::io::AsyncWriteExt;
    let Some(env) = Env::with_redis().await else {
        return;
    };
    let (_server, base) = serve(&env, &[]).await;
    let addr = base.trim_start_matches("http://").to_string();
    let mut conn = tokio::net::TcpStream::connect(&addr)
        .await
        .expect("connects");
    conn.write_all(
        b"POST /v1/runs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"input\":",
    )
    .await
    .expect("the headers and a little of the body");
    let started = std::time::Instant::now();
    let mut answer = Vec::new();
    tokio::time::timeout(
        producer::api::BODY_TIMEOUT + Duration::from_secs(10),
        conn.read_to_end(&mut answer),
    )
    .await
    .expect("answered, and the connection closed, soon after the body timeout")
    .expect("read");
    let waited = started.elapsed();
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("request_timeout"), "{answer}");
    assert!(
        waited >= producer::api::BODY_TIMEOUT - Duration::from_millis(500),
        "not before the timeout: {waited:?}"
    );
}

/// 3,000 clients open event streams against a producer whose file limit is 1,024 (a common
/// default): the streams it serves stop at half its connections, less the operator's reserve;
/// the others are refused with 503 and their connections closed; meanwhile `/healthz` answers
/// and the operator still opens a stream. (3,000 SSE clients made the API unreachable for
/// 15–20 s: the streams could take every connection.)
#[tokio::test(flavor = "multi_thread")]
async fn three_thousand_stream_clients_leave_requests_and_the_operator_a_way_in() {
    use tokio::io::AsyncWriteExt;
    const API: &str = "api-token-stream-flood-51c2";
    const ADMIN: &str = "admin-token-stream-flood-51c2";
    const CLIENTS: usize = 3_000;
    let Some(env) = Env::with_redis().await else {
        return;
    };
    let vars = [
        ("FREEWAY_API_TOKEN", API),
        ("FREEWAY_ADMIN_TOKEN", ADMIN),
        ("FREEWAY_SECRET_KEY", common::SECRET_HEX),
    ];
    let (_server, base) = serve_as(
        env.limited(1_024, &["serve", "--addr", "127.0.0.1:0"]),
        &vars,
    )
    .await;
    let addr = base.trim_start_matches("http://").to_string();
    let http = reqwest::Client::new();
    // Four clients per run: the most one run may have.
    let runs: Vec<_> = (0..CLIENTS / 4 + 1)
        .map(|i| run_body(&format!("u{i}"), "vendor/m"))
        .collect();
    let resp = http
        .post(format!("{base}/v1/runs:batch"))
        .bearer_auth(API)
        .json_body(&json!({ "runs": runs[..CLIENTS / 4] }))
        .send()
        .await
        .expect("batch");
    let batch = json_of(resp).await;
    let urls: Vec<String> = batch["results"]
        .as_array()
        .expect("results")
        .iter()
        .map(|r| r["events_url"].as_str().expect("an events_url").to_string())
        .collect();
    assert_eq!(urls.len(), CLIENTS / 4, "{batch}");
    let open = |path: String, auth: Option<&'static str>| {
        let addr = addr.clone();
        async move {
            let mut conn = tokio::net::TcpStream::connect(&addr)
                .await
                .expect("connects");
            let auth = auth.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
            conn.write_all(
                format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{auth}Accept: text/event-stream\r\n\r\n")
                    .as_bytes(),
            )
            .await
            .expect("a request");
            let mut head = [0u8; 12];
            conn.read_exact(&mut head).await.expect("a status line");
            let status: u16 = String::from_utf8_lossy(&head[9..12])
                .parse()
                .expect("a status");
            (status, conn)
        }
    };
    let clients: Vec<_> = urls
        .iter()
        .flat_map(|u| std::iter::repeat_n(u.clone(), 4))
        .map(|u| tokio::spawn(open(u, None)))
        .collect();
    let mut held = Vec::new();
    let mut refused = 0;
    for client in clients {
        let (status, conn) = client.await.expect("a client");
        match status {
            200 => held.push(conn),
            503 => refused += 1,
            other => panic!("a stream answered {other}"),
        }
    }
    // 960 connections at a file limit of 1,024; streams take at most half, 480; a twentieth of
    // those, 24, are the operator's.
    eprintln!(
        "stream flood: {} of {CLIENTS} streams served, {refused} refused",
        held.len()
    );
    assert_eq!((held.len(), refused), (456, CLIENTS - 456));

    let took = healthy_in(&http, &base).await;
    eprintln!(
        "stream flood: /healthz answered in {took:?} behind {} open streams",
        held.len()
    );
    let resp = http
        .post(format!("{base}/v1/runs"))
        .bearer_auth(API)
        .json_body(&runs[CLIENTS / 4])
        .send()
        .await
        .expect("enqueue");
    assert_eq!(resp.status().as_u16(), 202, "requests still get through");
    let run_id = json_of(resp).await["run_id"]
        .as_str()
        .expect("run id")
        .to_string();
    let path = format!("/v1/runs/{run_id}/events");
    let (status, _user) = open(format!("{path}?user_id=u{}", CLIENTS / 4), Some(API)).await;
    assert_eq!(status, 503, "a user's stream waits for a slot");
    let (status, _operator) = open(path, Some(ADMIN)).await;
    assert_eq!(status, 200, "the operator's reserve is there");
}

/// A credential past `FREEWAY_RATE_LIMIT` gets 429 with `Retry-After`; another credential is not
/// slowed by it. (No rate limit existed: a loop with one token had the producer to itself.)
#[tokio::test]
async fn a_credential_past_its_rate_is_429_and_another_is_not_slowed() {
    const API: &str = "api-token-rate-limit-7f3a";
    const ADMIN: &str = "admin-token-rate-limit-7f3a";
    let Some(env) = Env::with_redis().await else {
        return;
    };
    let vars = [
        ("FREEWAY_API_TOKEN", API),
        ("FREEWAY_ADMIN_TOKEN", ADMIN),
        ("FREEWAY_RATE_LIMIT", "5"),
    ];
    let (_server, base) = serve(&env, &vars).await;
    let http = reqwest::Client::new();
    let get = |token: &'static str| {
        http.get(format!("{base}/v1/rests"))
            .bearer_auth(token)
            .send()
    };
    let mut statuses = Vec::new();
    let mut retry_after = None;
    for _ in 0..15 {
        let resp = get(API).await.expect("answered");
        if resp.status().as_u16() == 429 {
            retry_after = resp
                .headers()
                .get("retry-after")
                .and_then(|v| v.to_str().ok())
                .map(str::to_string);
            let err = json_of(resp).await;
            assert_eq!(err["error"]["code"], "too_many_requests", "{err}");
            statuses.push(429);
        } else {
            statuses.push(resp.status().as_u16());
        }
    }
    assert_eq!(
        &statuses[..10],
        &[200; 10],
        "a burst of twice the rate passes"
    );
    assert!(statuses[10..].contains(&429), "{statuses:?}");
    assert_eq!(retry_after.as_deref(), Some("1"));
    let other = get(ADMIN).await.expect("answered");
    assert_eq!(
        other.status().as_u16(),
        200,
        "the admin token has its own rate"
    );
}
