//! The worker's command line as people use it: `--help`, `classify` on real captures, and
//! `run-one`'s exit codes for bad input.

use crate::support;

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

/// The providers and pools the corpus's routes are read with (`tests/corpus/SOURCES.md`).
const CORPUS_CONFIG: &str = r#"
[providers.groq]
base_url = "https://api.groq.com/openai/v1"
dialect = "groq"
[pools.groq-llama-70b]
provider = "groq"
models = ["llama-3.3-70b-versatile"]
connection = "each"
window = "rolling"
[providers.gemini]
base_url = "https://generativelanguage.googleapis.com/v1beta/openai"
dialect = "gemini"
[pools.gemini-flash]
provider = "gemini"
models = ["gemini-2.5-flash"]
connection = "each"
[providers.openai]
base_url = "https://api.openai.com/v1"
dialect = "openai"
[providers.anthropic]
base_url = "https://api.anthropic.com/v1"
dialect = "openai"
"#;

/// The route each corpus folder's answers came back on.
const CORPUS_ROUTES: [(&str, &str); 6] = [
    ("openrouter-free", "meta-llama/llama-3.3-70b-instruct:free"),
    ("openrouter-paid", "openai/gpt-4o-mini"),
    ("groq", "groq:llama-3.3-70b-versatile"),
    ("gemini", "gemini:gemini-2.5-flash"),
    ("openai", "openai:gpt-4o-mini"),
    ("anthropic", "anthropic:claude-sonnet-4-5"),
];

/// The rows of docs/design.md §3, each as the verdict and the rules `worker classify` names for
/// it. Every row must be met by at least two answers of the corpus.
#[rustfmt::skip]
const SPEC_ROWS: [(&str, &str, &[&str]); 21] = [
    ("3.1 the key cannot pay", "billing", &["3.1:billing", "3.1:usage_limit"]),
    ("3.1 OpenRouter's 402 on a platform route, no hint", "billing", &["3.1:402"]),
    ("3.1 a transient spend window", "billing_wait", &["3.1:billing_wait"]),
    ("3.2 row 0, the account's limit_source", "account", &["0:limit_source"]),
    ("3.2 row 0, one model at capacity", "route", &["0:capacity", "0:limit_source"]),
    ("3.2 row 0, an upstream's shared pool", "provider", &["0:limit_source"]),
    ("3.2 row 1, pool-wide headers", "account", &["1:x-ratelimit"]),
    ("3.2 row 1b, the quota in the message", "account", &["1b:free-models"]),
    ("3.2 row 2, a provider marker", "provider", &["2:provider_marker"]),
    ("3.2 row 3, a rate-limit type", "account", &["3:rate_limit_exceeded", "3:resource_exhausted"]),
    ("3.2 row 4, anything else", "ambiguous", &["4:ambiguous"]),
    ("3.3 a 429 off quota", "route", &["off_quota"]),
    ("3.3 a 429 off quota with a provider marker", "provider", &["off_quota"]),
    ("3.3 401/403", "auth", &["auth"]),
    ("3.3 moderation", "client", &["moderation"]),
    ("3.3 400/413/422", "client", &["client"]),
    ("3.3 a dead route or model, whatever the status", "gone", &["gone"]),
    ("3.3 (v3) a blocked key or organisation", "auth", &["3.3:blocked"]),
    ("3.3 (v3) a request too large for its limit", "client", &["3.3:too_large"]),
    ("3.3 (v3) a model out of capacity for everyone", "route", &["3.3:capacity"]),
    ("3.3 5xx", "server", &["server"]),
];

/// Every real-shaped answer of the corpus gets the verdict its file name starts with (and a day
/// rest when the name says `-day-`), read by `worker classify` on the route of its folder; every
/// row of docs/design.md §3 is met by two answers at least, and spent days by two day clocks.
#[test]
fn classify_gives_every_answer_of_the_corpus_its_verdict() {
    let corpus = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus");
    let config = std::env::temp_dir().join(format!("freeway-corpus-{}.toml", std::process::id()));
    std::fs::write(&config, CORPUS_CONFIG).expect("write the configuration");
    let config = config.to_str().expect("utf-8 path").to_string();
    let mut met = [0; SPEC_ROWS.len()];
    let mut day_clocks = std::collections::BTreeSet::new();
    for (folder, route) in CORPUS_ROUTES {
        let mut files: Vec<_> = std::fs::read_dir(corpus.join(folder))
            .expect("a corpus folder")
            .map(|e| e.expect("entry").path())
            .filter(|p| p.extension().and_then(|e| e.to_str()) == Some("http"))
            .collect();
        files.sort();
        assert!(!files.is_empty(), "{folder} holds answers");
        for path in files {
            let name = path.file_name().and_then(|n| n.to_str()).expect("name");
            let expected = name.split('-').next().expect("verdict prefix");
            let out = support::run_worker(
                &["classify", "--route", route],
                &[("FREEWAY_CONFIG", &config)],
                &std::fs::read(&path).expect("read"),
            );
            assert!(
                out.status.success(),
                "{folder}/{name}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let line: serde_json::Value =
                serde_json::from_slice(&out.stdout).expect("one JSON line");
            assert_eq!(line["verdict"], expected, "{folder}/{name}: {line}");
            assert_eq!(
                line["day"].as_bool().unwrap_or(false),
                name.contains("-day-"),
                "{folder}/{name}: {line}"
            );
            assert!(
                line["scope"].is_string() && line["rest_s"].is_u64() && line["rule"].is_string(),
                "{line}"
            );
            let row = SPEC_ROWS
                .iter()
                .position(|(_, verdict, rules)| {
                    line["verdict"] == *verdict && rules.iter().any(|rule| line["rule"] == *rule)
                })
                .unwrap_or_else(|| panic!("{folder}/{name}: {line} is no row of SPEC_ROWS"));
            met[row] += 1;
            if line["day"] == true {
                day_clocks.insert(folder);
            }
        }
    }
    for ((row, _, _), count) in SPEC_ROWS.iter().zip(met) {
        assert!(
            count >= 2,
            "{row}: {count} answer(s) of the corpus, not two"
        );
    }
    assert!(day_clocks.len() >= 2, "spent days only on {day_clocks:?}");
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
