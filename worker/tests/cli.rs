//! The worker's command line as people use it: `--help`, `classify` on real captures, and
//! `run-one`'s exit codes for bad input.

mod support;

use std::process::{Command, Output, Stdio};

fn worker(args: &[&str], stdin: &[u8]) -> Output {
    support::run_worker(args, &[], stdin)
}

#[test]
fn help_describes_the_commands() {
    let out = worker(&["--help"], b"");
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    for word in ["run-one", "classify", "REDIS_URL"] {
        assert!(text.contains(word), "{word} in --help");
    }
}

#[test]
fn classify_prints_the_verdict_named_by_each_fixture() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/classify");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).expect("fixtures") {
        let path = entry.expect("entry").path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .expect("name")
            .to_string();
        let expected = name.split('-').next().expect("verdict prefix");
        let out = worker(
            &[
                "classify",
                "--route",
                "meta-llama/llama-3.3-70b-instruct:free",
            ],
            &std::fs::read(&path).expect("read"),
        );
        assert!(
            out.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let line: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON line");
        assert_eq!(line["verdict"], expected, "{name}: {line}");
        assert!(
            line["scope"].is_string() && line["rest_s"].is_u64() && line["rule"].is_string(),
            "{line}"
        );
        seen += 1;
    }
    assert!(seen >= 10, "every fixture was read");
}

#[test]
fn classify_rejects_what_is_not_an_http_response_in_one_line() {
    let out = worker(&["classify", "--route", "a/b:free"], b"hello");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(!err.contains("panicked"));
}

#[test]
fn run_one_rejects_a_bad_job_with_exit_2() {
    let out = worker(&["run-one", "-"], br#"{"user_id":"u","routes":[]}"#);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("input") || err.contains("routes"), "{err}");
    let out = worker(&["run-one", "/nonexistent/job.json"], b"");
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn bad_configuration_is_one_clear_line() {
    let out = Command::new(env!("CARGO_BIN_EXE_worker"))
        .args(["run-one", "-"])
        .env("FREEWAY_SUMMARY", "maybe")
        .stdin(Stdio::null())
        .output()
        .expect("worker runs");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("FREEWAY_SUMMARY"), "{err}");
}
