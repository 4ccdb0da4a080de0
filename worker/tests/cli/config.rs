//! `FREEWAY_CONFIG` as an operator meets it: every binary refuses a bad file with one line that
//! names the key and exit 2, and `worker config check` prints what is in force, without a key.

use crate::support;

use std::path::PathBuf;
use std::process::Output;

const GROQ: &str = r#"
[providers.groq]
base_url = "https://api.groq.com/openai/v1"
api_key_env = "GROQ_API_KEY"
dialect = "groq"

[pools.groq-llama-70b]
provider = "groq"
models = ["llama-3.3-70b-versatile"]
connection = "each"
rpm = 30
rpd = 1000
window = "rolling"

[providers.gemini]
base_url = "https://generativelanguage.googleapis.com/v1beta/openai"
api_key_env = "GEMINI_API_KEY"
dialect = "gemini"

[pools.gemini-flash]
provider = "gemini"
models = ["gemini-2.5-flash"]
connection = "platform"
rpm = 10
rpd = 250
day_reset = "America/Los_Angeles"

[pools.openrouter-free]
rpd = 1000
"#;

/// `text` in a file of its own; the path.
fn config_file(text: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("freeway-config-{}", ulid::Ulid::generate()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("freeway.toml");
    std::fs::write(&path, text).expect("write config");
    path
}

fn check(config: &str, env: &[(&str, &str)]) -> Output {
    let path = config_file(config);
    let path = path.to_str().expect("utf-8 path");
    let mut env = env.to_vec();
    env.push(("FREEWAY_CONFIG", path));
    support::run_worker(&["config", "check"], &env, b"")
}

/// Exit 2 and one line on stderr that contains `want`.
fn assert_refused(out: &Output, want: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    assert!(err.contains("FREEWAY_CONFIG"), "names the variable: {err}");
    assert!(err.contains(want), "{want:?} in {err}");
}

#[test]
fn config_check_prints_the_effective_providers_and_pools_and_no_key() {
    let out = check(GROQ, &[("GEMINI_API_KEY", "AIza-secret-gemini")]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!text.contains("AIza-secret"), "no key in {text}");
    let v: serde_json::Value = serde_json::from_str(&text).expect("one JSON document");
    let provider = |name: &str| {
        v["providers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("{name} in {v}"))
    };
    assert_eq!(provider("groq")["dialect"], "groq");
    assert_eq!(provider("gemini")["platform_key"], true);
    assert_eq!(provider("groq")["platform_key"], false);
    assert_eq!(
        provider("openrouter")["base_url"],
        "https://openrouter.ai/api/v1"
    );
    let pool = |name: &str| {
        v["pools"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("{name} in {v}"))
    };
    let free = pool("openrouter-free");
    assert_eq!(
        (free["rpm"].as_u64(), free["rpd"].as_u64()),
        (Some(20), Some(1000))
    );
    assert_eq!(
        free["models"],
        serde_json::json!(["*:free", "openrouter/free"])
    );
    assert_eq!(pool("groq-llama-70b")["connection"], "each");
    assert_eq!(pool("groq-llama-70b")["window"], "rolling");
    assert_eq!(pool("gemini-flash")["day_reset"], "America/Los_Angeles");
}

#[test]
fn config_check_prints_tiers_and_prices_as_understood() {
    let text = format!(
        "{GROQ}\n[tiers.default]\nspend_usd_per_day = 0.5\n[tiers.pro]\nweight = 4\n\
         day_reset = \"Europe/Paris\"\n[prices]\n\"groq:*\" = {{ input = 0.59, output = 0.79 }}\n\
         \"openai/gpt-4o-mini\" = {{ input = 0.15, output = 0.6 }}\n"
    );
    let out = check(&text, &[("GEMINI_API_KEY", "AIza-secret-gemini")]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    assert_eq!(
        v["tiers"],
        serde_json::json!([
            { "name": "default", "weight": 1, "spend_usd_per_day": 0.5, "day_reset": "UTC" },
            { "name": "pro", "weight": 4, "spend_usd_per_day": null, "day_reset": "Europe/Paris" },
        ])
    );
    // In the order they are tried: the provider's own key first.
    assert_eq!(
        v["prices"],
        serde_json::json!([
            { "key": "groq:*", "provider": "groq", "models": "*", "input": 0.59, "output": 0.79 },
            { "key": "openai/gpt-4o-mini", "provider": null, "models": "openai/gpt-4o-mini",
              "input": 0.15, "output": 0.6 },
        ])
    );
}

#[test]
fn bad_tiers_and_prices_are_refused() {
    assert_refused(
        &check(
            "[prices]\n\"openai/*\" = { input = -0.15, output = 0.6 }\n",
            &[],
        ),
        "prices.\"openai/*\".input: must be a finite number of at least 0",
    );
    assert_refused(
        &check("[tiers.pro]\nspend_usd_per_day = \"five\"\n", &[]),
        "invalid type: string \"five\"",
    );
    assert_refused(
        &check("[tiers.pro]\nweight = 0\n", &[]),
        "tiers.pro.weight: must be at least 1",
    );
    assert_refused(
        &check("[tiers.default]\nspend_usd_per_day = -inf\n", &[]),
        "tiers.default.spend_usd_per_day",
    );
    assert_refused(
        &check("[tiers.pro]\nweigth = 2\n", &[]),
        "unknown field `weigth`",
    );
}

#[test]
fn without_a_file_the_builtin_catalog_is_in_force() {
    let out = support::run_worker(&["config", "check"], &[], b"");
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(v["providers"].as_array().map(Vec::len), Some(1));
    assert_eq!(v["pools"][0]["name"], "openrouter-free");
    assert_eq!(
        v["tiers"],
        serde_json::json!([{ "name": "default", "weight": 1, "spend_usd_per_day": null, "day_reset": "UTC" }])
    );
    assert_eq!(v["prices"], serde_json::json!([]));
}

#[test]
fn a_missing_file_is_refused() {
    let out = support::run_worker(
        &["config", "check"],
        &[("FREEWAY_CONFIG", "/nonexistent/freeway.toml")],
        b"",
    );
    assert_refused(&out, "cannot read /nonexistent/freeway.toml");
}

#[test]
fn an_unknown_key_is_refused() {
    assert_refused(
        &check("[pools.openrouter-free]\nrpx = 3\n", &[]),
        "unknown field `rpx`",
    );
    assert_refused(&check("[pool.x]\n", &[]), "unknown field `pool`");
}

#[test]
fn a_bad_glob_is_refused() {
    let text = "[pools.p]\nprovider = \"openrouter\"\nmodels = [\"llama[23]\"]\n";
    assert_refused(&check(text, &[]), "pools.p.models: bad glob \"llama[23]\"");
}

#[test]
fn a_route_claimed_by_two_pools_is_refused() {
    let text = "[pools.p]\nprovider = \"openrouter\"\nmodels = [\"meta-llama/*\"]\n";
    assert_refused(
        &check(text, &[]),
        "pools.openrouter-free and pools.p both claim",
    );
}

#[test]
fn an_unknown_dialect_is_refused() {
    let text = "[providers.x]\nbase_url = \"https://x.example\"\ndialect = \"klingon\"\n";
    assert_refused(&check(text, &[]), "unknown variant `klingon`");
}

#[test]
fn an_unknown_zone_is_refused() {
    let text = "[pools.openrouter-free]\nday_reset = \"Mars/Olympus_Mons\"\n";
    assert_refused(
        &check(text, &[]),
        "pools.openrouter-free.day_reset: unknown time zone",
    );
}

#[test]
fn a_provider_without_a_base_url_is_refused() {
    assert_refused(
        &check("[providers.x]\ndialect = \"openai\"\n", &[]),
        "providers.x.base_url: missing",
    );
}

#[test]
fn a_platform_pool_whose_key_variable_is_unset_is_refused() {
    assert_refused(&check(GROQ, &[]), "GEMINI_API_KEY is not set");
}

#[test]
fn every_binary_refuses_a_bad_file_before_doing_anything() {
    let path = config_file("[pools.openrouter-free]\nrpx = 3\n");
    let path = path.to_str().expect("utf-8 path");
    // `worker prune` touches only the store; it still reads the configuration first.
    let out = support::run_worker(
        &["prune", "--older-than-days", "30"],
        &[
            ("FREEWAY_CONFIG", path),
            ("DATABASE_URL", "sqlite::memory:"),
        ],
        b"",
    );
    assert_refused(&out, "unknown field `rpx`");
    let classify = std::process::Command::new(env!("CARGO_BIN_EXE_worker"))
        .args(["classify", "--route", "x/y:free"])
        .env("FREEWAY_CONFIG", path)
        .output()
        .expect("worker runs");
    assert_refused(&classify, "unknown field `rpx`");
}

#[test]
fn classify_reads_a_route_of_a_configured_provider_by_its_dialect() {
    let path = config_file(
        "[providers.gemini]\nbase_url = \"https://g.example/v1beta/openai\"\ndialect = \"gemini\"\n\
         [pools.gemini-flash]\nprovider = \"gemini\"\nmodels = [\"gemini-*\"]\n",
    );
    let raw = "HTTP/1.1 429 Too Many Requests\r\ncontent-type: application/json\r\n\r\n\
        [{\"error\":{\"code\":429,\"message\":\"You exceeded your current quota\",\"status\":\"RESOURCE_EXHAUSTED\",\
        \"details\":[{\"@type\":\"type.googleapis.com/google.rpc.QuotaFailure\",\"violations\":[{\"quotaId\":\"GenerateRequestsPerDayPerProjectPerModel-FreeTier\"}]},\
        {\"@type\":\"type.googleapis.com/google.rpc.RetryInfo\",\"retryDelay\":\"36s\"}]}}]";
    let out = support::run_worker(
        &["classify", "--route", "gemini:gemini-2.5-flash"],
        &[("FREEWAY_CONFIG", path.to_str().expect("utf-8 path"))],
        raw.as_bytes(),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON line");
    assert_eq!(v["verdict"], "account");
    assert_eq!(v["scope"], "pool:gemini-flash");
    assert_eq!(v["day"], true);
    // Until the next midnight Pacific: more than the RetryInfo's 36 s, at most a day.
    let rest_s = v["rest_s"].as_u64().expect("rest_s");
    assert!(rest_s > 36 && rest_s <= 25 * 3600, "{v}");
}

/// Tokens and a key that pass the start-up checks (docs/api.md §3: tokens of 16 characters or more,
/// no two alike).
const GOOD_API_TOKEN: &str = "api-token-8c41f0e7b2d95a36";
const GOOD_ADMIN_TOKEN: &str = "admin-token-1e9b07c3f5a4d862";
const GOOD_SECRET_KEY: &str = "c7a1e04f92b6d3580e1f7a2c4b9d6e8305f1a7c2e9b4d60817c3f5a2e8d9b046";

/// A refused start: its environment, what the line must say, and a secret it must not show.
type Refusal<'a> = (&'a [(&'a str, &'a str)], &'a str, &'a str);

/// The worker started as a replica (no command) with `env`; its output once it ends, which a
/// refused configuration makes it do at once (it is killed after 20 s otherwise).
fn start_worker(env: &[(&str, &str)]) -> Output {
    use std::process::{Command, Stdio};
    let mut child = Command::new(env!("CARGO_BIN_EXE_worker"))
        .envs(env.iter().copied())
        // Nowhere to connect: a configuration that passed would fail, not serve.
        .env("REDIS_URL", "redis://127.0.0.1:1")
        .env("RUST_BACKTRACE", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("worker starts");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while child.try_wait().expect("wait").is_none() {
        if std::time::Instant::now() > deadline {
            child.kill().expect("kill");
            panic!("the worker did not stop on a bad configuration");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.wait_with_output().expect("worker ends")
}

/// Exit 2 and one line, `worker: bad configuration: …`, containing `want` and not `secret`.
fn assert_refused_without(out: &Output, want: &str, secret: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    assert!(
        err.starts_with("worker: bad configuration: ") && err.contains(want),
        "{want:?} in {err}"
    );
    assert!(
        secret.is_empty() || !err.contains(secret),
        "no secret in {err}"
    );
}

#[test]
fn weak_or_shared_secrets_and_overlong_durations_are_refused_at_start_and_by_config_check() {
    let zero_key = "0".repeat(64);
    let long_canary = config_file("[pools.openrouter-free]\ncanary_every = \"99999999999999d\"\n");
    let long_canary = long_canary.to_str().expect("utf-8 path");
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
        (&[("FREEWAY_CONFIG", long_canary)], "FREEWAY_CONFIG: ", ""),
    ];
    for (env, want, secret) in cases {
        let out = support::run_worker(&["config", "check"], env, b"");
        assert_refused_without(&out, want, secret);
        assert_refused_without(&start_worker(env), want, secret);
    }
    let out = support::run_worker(
        &["config", "check"],
        &[("FREEWAY_CONFIG", long_canary)],
        b"",
    );
    assert_refused_without(
        &out,
        "pools.openrouter-free.canary_every: \"99999999999999d\" is longer than 365d",
        "",
    );
}

#[test]
fn long_distinct_tokens_a_strong_key_and_a_yearly_canary_pass_config_check() {
    let path = config_file("[pools.openrouter-free]\ncanary_every = \"365d\"\n");
    let out = support::run_worker(
        &["config", "check"],
        &[
            ("FREEWAY_API_TOKEN", GOOD_API_TOKEN),
            ("FREEWAY_ADMIN_TOKEN", GOOD_ADMIN_TOKEN),
            ("FREEWAY_SECRET_KEY", GOOD_SECRET_KEY),
            ("FREEWAY_CONFIG", path.to_str().expect("utf-8 path")),
        ],
        b"",
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    let printed = v.to_string();
    for secret in [GOOD_API_TOKEN, GOOD_ADMIN_TOKEN, GOOD_SECRET_KEY] {
        assert!(!printed.contains(secret) && !err.contains(secret));
    }
}
