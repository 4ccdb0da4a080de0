//! The `sim` binary: help, one-line errors with exit code 2, serving and graceful shutdown.

use crate::common;

use std::process::{Command, Stdio};

use tokio::io::{AsyncBufReadExt, BufReader};

const BIN: &str = env!("CARGO_BIN_EXE_sim");

fn run(args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let mut cmd = Command::new(BIN);
    cmd.args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("sim binary runs")
}

#[test]
fn help_exits_zero_and_documents_flags_and_directives() {
    let out = run(&["--help"], &[]);
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for needle in [
        "--rpm",
        "--window-s",
        "--shape",
        "--mode",
        "[env: SIM_RPM=]",
        "[[tools:N]]",
        "[[answer:TEXT]]",
        "usage_layout_b",
        "--price <MODEL=IN/OUT>",
        "--usage-cost",
        "\"usage\": {\"include\": true}",
    ] {
        assert!(help.contains(needle), "--help lacks {needle}");
    }
}

#[test]
fn bad_settings_are_one_line_on_stderr_and_exit_2() {
    type Case<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)], &'a str);
    let cases: [Case<'_>; 8] = [
        (&["--rpm", "abc"], &[], "--rpm"),
        (&["--shape", "2024"], &[], "unknown shape `2024`"),
        (&["--mode", "anthropic"], &[], "unknown mode"),
        (
            &["--window-s", "0"],
            &[],
            "window_s must be between 1 and 86400",
        ),
        (&[], &[("SIM_RPD", "-3")], "--rpd"),
        (&["--price", "a/b:free=1/2"], &[], "is a free model"),
        (&["--price", "a/b=1"], &[], "IN/OUT"),
        (&["--usage-cost", "never"], &[], "unknown usage cost"),
    ];
    for (args, env, expected) in cases {
        let out = run(args, env);
        assert_eq!(out.status.code(), Some(2), "{args:?} {env:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked") && out.stdout.is_empty());
    }
}

#[tokio::test]
async fn the_binary_announces_its_address_serves_and_stops_on_sigterm() {
    let mut child = tokio::process::Command::new(BIN)
        .args([
            "--addr",
            "127.0.0.1:0",
            "--rpm",
            "7",
            "--price",
            "a/paid=1.5/6",
        ])
        .env("SIM_PRICES", "ignored/by-the-flag=9/9")
        .env("SIM_MODE", "openrouter")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn sim");
    let stdout = child.stdout.take().expect("stdout");
    let line = BufReader::new(stdout)
        .lines()
        .next_line()
        .await
        .expect("read stdout")
        .expect("a line");
    let base = line
        .strip_prefix("sim listening on ")
        .expect("announcement line")
        .to_owned();
    assert!(
        base.starts_with("http://127.0.0.1:") && !base.ends_with(":0"),
        "{line}"
    );

    let client = common::client();
    let res = client
        .get(format!("{base}/_sim/config"))
        .send()
        .await
        .expect("config request");
    let v = common::parse(&res.text().await.expect("body"));
    assert_eq!(v["rpm"], serde_json::json!(7), "flags reach the server");
    let res = client
        .get(format!("{base}/_sim/prices"))
        .send()
        .await
        .expect("prices request");
    let v = common::parse(&res.text().await.expect("body"));
    assert_eq!(
        v,
        serde_json::json!({"*": {"input": 0.1, "output": 0.4}, "a/paid": {"input": 1.5, "output": 6.0}}),
        "--price reaches the server"
    );

    let pid = child.id().expect("pid").to_string();
    let killed = Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill");
    assert!(killed.success());
    let status = child.wait().await.expect("wait");
    assert!(status.success(), "graceful exit, got {status:?}");
}
