//! Failing over between free tiers of different shapes: the engine on one simulator playing
//! OpenRouter, Groq, Gemini and a paid provider at once, with the providers and pools of a
//! configuration file. Assertions read the simulator's call log (which provider, which key) and
//! the rests the fleet holds.

use crate::support;

use freeway::catalog::Catalog;
use freeway::classify::RestScope;
use freeway::engine::{Outcome, WhenResting};
use freeway::job::{RunJob, RunRequest};
use freeway::pace::Pacer;
use freeway::provider::{ApiKey, EnvTargets, HttpProvider, Targets, Timeouts};
use freeway::rest::Rests;
use freeway::route::{OPENROUTER_FREE_POOL, RouteSpec};
use freeway::run::RunStatus;
use freeway::store::Store;
use sim::Provider;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

const OR_FREE: &str = "meta-llama/llama-3.3-70b-instruct:free";
const GROQ_POOL: &str = "groq-llama-70b";

/// The configuration that points freeway at this simulator's providers, with the limits it
/// plays declared, or (`declared: false`) only the providers and their pools' shapes.
fn catalog(sim: &sim::SimHandle, declared: bool) -> Catalog {
    let openrouter = format!(
        "[providers.openrouter]\nbase_url = \"{}\"\n",
        sim.base_url()
    );
    let config = sim.freeway_config();
    let config: String = match declared {
        true => config,
        false => config
            .lines()
            .filter(|l| !l.starts_with("rpm =") && !l.starts_with("rpd ="))
            .map(|l| format!("{l}\n"))
            .collect(),
    };
    Catalog::from_toml(&(openrouter + &config)).expect("a valid configuration")
}

/// The platform key of each provider: the call log shows which one every call spent.
fn platform_keys() -> BTreeMap<String, ApiKey> {
    [
        ("openrouter", "sk-or-platform"),
        ("groq", "gsk_platform"),
        ("gemini", "AIza-platform"),
        ("paid", "sk-paid-platform"),
    ]
    .into_iter()
    .map(|(p, k)| (p.to_string(), ApiKey::new(k)))
    .collect()
}

struct Setup {
    sim: sim::SimHandle,
    catalog: Arc<Catalog>,
    h: support::Harness,
}

async fn setup(config: sim::SimConfig) -> Setup {
    setup_on(config, true).await
}

/// [`setup`], with the pools' limits declared or not.
async fn setup_on(config: sim::SimConfig, declared: bool) -> Setup {
    let sim = sim::start(config, "127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let catalog = Arc::new(catalog(&sim, declared));
    let timeouts = Timeouts {
        connect: Duration::from_secs(2),
        first_byte: Duration::from_secs(2),
        idle: Duration::from_secs(2),
        total: Duration::from_secs(10),
    };
    let provider = Arc::new(HttpProvider::new(timeouts).unwrap());
    let mut h = support::harness(provider, &sim.base_url());
    let targets: Arc<dyn Targets> = Arc::new(EnvTargets::new(catalog.clone(), platform_keys()));
    h.engine = h.engine_with(targets.clone());
    h.targets = targets;
    Setup { sim, catalog, h }
}

impl Setup {
    async fn run(&self, user: &str, routes: &[&str]) -> Outcome {
        self.run_job(&self.job(user, "hi", routes)).await
    }

    fn job(&self, user: &str, input: &str, routes: &[&str]) -> RunJob {
        let request = RunRequest::new(
            user,
            input,
            routes
                .iter()
                .map(|r| RouteSpec::parse_cli(r, &self.catalog))
                .collect(),
        );
        RunJob::new(request, freeway::clock::epoch_ms())
    }

    async fn run_job(&self, job: &RunJob) -> Outcome {
        let chain = job.check(&self.catalog).expect("a valid job");
        let outcome = self.h.engine.execute(job, &chain, WhenResting::Refuse);
        outcome.await.expect("no infrastructure fault")
    }

    /// `(provider, key, status)` of every call, in order.
    fn calls(&self) -> Vec<(Provider, String, u16)> {
        let log = self.sim.calls().into_iter();
        log.map(|c| (c.provider, c.key, c.status)).collect()
    }

    async fn pool_rest_ms(&self, pool: &str) -> Option<u64> {
        let scope = RestScope::Pool(pool.to_string());
        self.h.rests.remaining(&scope).await.unwrap()
    }
}

fn succeeded() -> Outcome {
    Outcome::Finished {
        status: RunStatus::Succeeded,
        code: None,
    }
}

const CHAIN: [&str; 3] = [OR_FREE, "groq:llama-3.3-70b-versatile", "paid:gpt-4o-mini"];

#[tokio::test]
async fn a_chain_of_free_tiers_overflows_by_shape_into_groq_then_into_paid() {
    // OpenRouter's free minute is already spent; Groq allows one call a window.
    let s = setup(sim::SimConfig {
        rpm: 0,
        groq_rpm: 1,
        ..sim::SimConfig::default()
    })
    .await;
    assert_eq!(s.run("u1", &CHAIN).await, succeeded());
    assert_eq!(
        s.calls(),
        [
            (Provider::OpenRouter, "sk-or-platform".into(), 429),
            (Provider::Groq, "gsk_platform".into(), 200),
        ],
        "the OpenRouter pool refused, Groq answered with its own key"
    );
    let or_rest = s.pool_rest_ms(OPENROUTER_FREE_POOL).await;
    assert!(or_rest.is_some_and(|ms| ms <= 60_000), "{or_rest:?}");

    // The next run skips the resting OpenRouter pool without a call, and Groq's window (one
    // call) is spent — its limiter says so (Groq's answer speaks of its day, 999 left): no 429,
    // and the run goes to the paid provider.
    assert_eq!(s.run("u2", &CHAIN).await, succeeded());
    assert_eq!(
        s.calls()[2..],
        [(Provider::Generic, "sk-paid-platform".into(), 200)]
    );
    let listed: Vec<(String, String, bool)> =
        s.h.rests
            .list()
            .await
            .unwrap()
            .into_iter()
            .map(|r| (r.scope, r.key, r.reason.starts_with("headroom")))
            .collect();
    assert_eq!(
        listed,
        [("pool".to_string(), OPENROUTER_FREE_POOL.to_string(), false)]
    );
}

/// docs/design.md §4.4 (v4), limits stated in a refusal: Groq states its minute's requests
/// only in a refusal's message ("RPM: Limit 2"), Gemini in its `QuotaFailure`'s `quotaValue`.
/// A pool that declares no limit learns it from the first refusal, and no call goes into the
/// window that refusal closed.
#[tokio::test]
async fn a_limit_stated_only_in_a_refusal_is_learned_from_the_first_one() {
    let s = setup_on(
        sim::SimConfig {
            groq_rpm: 2,
            gemini_rpm: 3,
            ..sim::SimConfig::default()
        },
        false,
    )
    .await;
    for (route, provider, pool, rpm) in [
        ("groq:llama-3.3-70b-versatile", Provider::Groq, GROQ_POOL, 2),
        (
            "gemini:gemini-2.5-flash",
            Provider::Gemini,
            "gemini-flash",
            3,
        ),
    ] {
        for n in 0..rpm + 3 {
            let user = format!("u{n}");
            assert_eq!(
                s.run(&user, &[route, "paid:gpt-4o-mini"]).await,
                succeeded()
            );
        }
        let statuses: Vec<u16> = s
            .calls()
            .into_iter()
            .filter(|(p, _, _)| *p == provider)
            .map(|(_, _, status)| status)
            .collect();
        let expected = [vec![200; rpm as usize], vec![429]].concat();
        assert_eq!(
            statuses, expected,
            "{route}: one refusal, then no call into its window"
        );
        let limits = s
            .catalog
            .pools()
            .find(|p| p.name == pool)
            .map(|p| p.limits())
            .expect("the pool");
        assert_eq!(limits.per_window, None, "nothing declared");
        let instance = format!("{pool}@platform");
        let usage = s.h.pace.usage(&instance, &limits, u64::MAX).await.unwrap();
        assert_eq!(usage.learned.per_window, Some(rpm), "{route}: {usage:?}");
        assert_eq!(
            usage.learned.per_window_from,
            Some(freeway::pace::LimitSource::Refusal),
            "{route}: from the refusal's body"
        );
        assert_eq!(
            usage.learned.working_per_window, None,
            "a refusal that states its limit lowers nothing below it"
        );
    }
}

#[tokio::test]
async fn groqs_per_model_headers_never_rest_the_openrouter_pool() {
    let s = setup(sim::SimConfig {
        groq_rpm: 0,
        ..sim::SimConfig::default()
    })
    .await;
    assert_eq!(
        s.run("u1", &["groq:llama-3.3-70b-versatile", OR_FREE])
            .await,
        succeeded()
    );
    assert_eq!(
        s.calls(),
        [
            (Provider::Groq, "gsk_platform".into(), 429),
            (Provider::OpenRouter, "sk-or-platform".into(), 200),
        ]
    );
    assert!(
        s.pool_rest_ms(&format!("{GROQ_POOL}@platform"))
            .await
            .is_some()
    );
    assert_eq!(s.pool_rest_ms(OPENROUTER_FREE_POOL).await, None);
}

#[tokio::test]
async fn a_spent_gemini_day_rests_its_pool_until_midnight_pacific() {
    let s = setup(sim::SimConfig {
        gemini_rpd: 0,
        ..sim::SimConfig::default()
    })
    .await;
    let gemini = "gemini:gemini-2.5-flash";
    assert_eq!(
        s.run("u1", &[gemini, "paid:gpt-4o-mini"]).await,
        succeeded()
    );
    assert_eq!(
        s.calls()[0],
        (Provider::Gemini, "AIza-platform".into(), 429)
    );
    let now = freeway::clock::epoch_ms();
    let midnight = freeway::day::next_midnight_ms(chrono_tz::America::Los_Angeles, now);
    let rest = s
        .pool_rest_ms("gemini-flash@platform")
        .await
        .expect("the pool rests");
    // Gemini's RetryInfo said under a minute; a spent day is worth nothing before midnight.
    assert!(
        rest + 5_000 >= midnight - now && rest <= midnight - now,
        "rests {rest} ms, midnight Pacific is {} ms away",
        midnight - now
    );
}

#[tokio::test]
async fn a_users_own_groq_key_spends_its_own_pool_instance() {
    let mut s = setup(sim::SimConfig {
        groq_rpm: 1,
        ..sim::SimConfig::default()
    })
    .await;
    let store = freeway::store::SqlStore::open("sqlite::memory:")
        .await
        .unwrap();
    let secret = freeway::store::SecretKey::from_hex(
        "d35c8a02e15d2394feeea3d64bd3e2760418d5bf0a2b0b9dcd57bb17344f0d4f",
    )
    .unwrap();
    let connection = freeway::store::NewConnection {
        id: "conn_x".into(),
        user_id: "u1".into(),
        provider: "groq".into(),
        api_key: ApiKey::new("gsk_users_own"),
    };
    store
        .put_connection(&secret, &connection, &s.catalog)
        .await
        .unwrap();
    let keys = freeway::store::SecretKeys {
        current: secret,
        previous: None,
    };
    let targets = freeway::store::StoreTargets::new(
        EnvTargets::new(s.catalog.clone(), platform_keys()),
        store,
        Some(keys),
    );
    s.h.engine = s.h.engine_with(Arc::new(targets));
    let own = "groq:llama-3.3-70b-versatile@conn_x";
    let platform = "groq:llama-3.3-70b-versatile";
    // Each key has one call a window: the user's and the platform's do not share it.
    assert_eq!(s.run("u1", &[own]).await, succeeded());
    assert_eq!(s.run("u1", &[platform]).await, succeeded());
    assert_eq!(
        s.calls(),
        [
            (Provider::Groq, "gsk_users_own".into(), 200),
            (Provider::Groq, "gsk_platform".into(), 200),
        ]
    );
    // The user's window is spent: the user's instance is paced out (no call), the platform's
    // is not touched.
    assert_eq!(s.run("u1", &[own, "paid:gpt-4o-mini"]).await, succeeded());
    assert_eq!(
        s.calls()[2..],
        [(Provider::Generic, "sk-paid-platform".into(), 200)]
    );
    let pace = |instance: String| {
        let limits = s
            .catalog
            .pools()
            .find(|p| p.name == GROQ_POOL)
            .map(|p| p.limits());
        let pace = s.h.pace.clone();
        async move {
            let limits = limits.expect("the Groq pool declares its limit");
            pace.peek(&instance, &limits, u64::MAX, 0).await.unwrap()
        }
    };
    assert!(matches!(
        pace(format!("{GROQ_POOL}@conn_x")).await,
        freeway::pace::Slot::In(_)
    ));
    assert!(matches!(
        pace(format!("{GROQ_POOL}@platform")).await,
        freeway::pace::Slot::In(_)
    ));
}

#[tokio::test]
async fn a_spent_groq_day_rests_that_models_pool_for_its_hint_uncapped() {
    let s = setup(sim::SimConfig {
        groq_rpd: 0,
        ..sim::SimConfig::default()
    })
    .await;
    let groq = "groq:llama-3.3-70b-versatile";
    assert_eq!(s.run("u1", &[groq, "paid:gpt-4o-mini"]).await, succeeded());
    assert_eq!(s.calls()[0], (Provider::Groq, "gsk_platform".into(), 429));
    // Groq's day is rolling: its retry-after (the simulator's wait to the refill) is the rest.
    let rest = s
        .pool_rest_ms("groq-llama-70b@platform")
        .await
        .expect("the pool rests");
    assert!(
        rest > 300_000,
        "a day refusal is not capped at 300 s: {rest}"
    );
}

#[tokio::test]
async fn gemini_parallel_calls_without_index_run_as_two_tools_and_their_signature_goes_back() {
    let mut s = setup(sim::SimConfig::default()).await;
    let tools = support::tool_service::ToolService::start().await;
    let runner = freeway::tools::ToolRunner::new(Some(tools.url.clone())).unwrap();
    s.h.engine = s.h.engine_with(s.h.targets.clone()).with_tools(runner);
    let mut job = s.job(
        "u1",
        "weather twice [[tools:1]] [[parallel:2]]",
        &["gemini:gemini-2.5-flash"],
    );
    job.request.tools = vec![freeway::chat::ToolSpec {
        name: "weather".into(),
        description: "the weather in a city".into(),
        parameters: serde_json::json!({"type": "object"}),
        approval: Default::default(),
    }];

    assert_eq!(s.run_job(&job).await, succeeded());
    // Two calls, each with its own arguments: not one call with `{"step":1}{"step":2}`.
    let ran = tools.requests();
    let arguments: Vec<_> = ran.iter().map(|r| r.arguments.clone()).collect();
    assert_eq!(
        arguments,
        vec![
            serde_json::json!({"step": 1}),
            serde_json::json!({"step": 2})
        ]
    );
    assert_ne!(ran[0].tool_call_id, ran[1].tool_call_id);
    // The sim refuses a turn whose signature did not come back (a 400); both calls were served.
    let statuses: Vec<u16> = s.calls().iter().map(|c| c.2).collect();
    assert_eq!(statuses, vec![200, 200], "{:?}", s.sim.calls());
    assert!(
        s.sim
            .calls()
            .iter()
            .all(|c| c.provider == Provider::Gemini && c.stream)
    );

    let transcript = s.h.store.transcript(&job.conversation_id).await.unwrap();
    let calls = transcript
        .iter()
        .find(|m| !m.tool_calls.is_empty())
        .map(|m| m.tool_calls.clone())
        .expect("the assistant's tool turn is stored");
    assert_eq!(calls.len(), 2);
    let signature = calls[0]
        .extra_content
        .as_ref()
        .and_then(|e| e.pointer("/google/thought_signature"));
    assert!(
        signature
            .and_then(|s| s.as_str())
            .is_some_and(|s| !s.is_empty()),
        "{calls:?}"
    );
    assert_eq!(
        calls[1].extra_content, None,
        "only the first call of a turn is signed"
    );
}

#[tokio::test]
async fn a_gemini_turn_sent_back_without_its_signature_is_refused_as_a_client_error() {
    let s = setup(sim::SimConfig::default()).await;
    let body = serde_json::json!({
        "model": "gemini-2.5-flash",
        "messages": [
            {"role": "user", "content": "weather"},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": "{}"}}
            ]},
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}
        ]
    });
    let response = reqwest::Client::new()
        .post(format!(
            "{}/chat/completions",
            s.sim.base_url_of(Provider::Gemini)
        ))
        .bearer_auth("AIza-platform")
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    let mut headers = freeway::headers::Headers::new();
    for (name, value) in response.headers() {
        headers.push(name.as_str(), value.to_str().unwrap_or_default());
    }
    let text = response.text().await.unwrap();
    assert!(
        text.contains("missing a thought_signature") && text.contains("default_api:weather"),
        "{text}"
    );
    // And freeway reads it as the request's fault: no rest, no retry elsewhere.
    let class = freeway::classify::classify_response(
        400,
        &headers,
        text.as_bytes(),
        &freeway::route::Route::parse("gemini:gemini-2.5-flash", &s.catalog).unwrap(),
        freeway::clock::epoch_ms(),
    );
    assert_eq!(class.verdict, freeway::classify::Verdict::Client);
}

#[tokio::test]
async fn an_answer_that_leaves_no_request_closes_the_route_until_its_reset_without_a_429() {
    let s = setup(sim::SimConfig {
        groq_rpd: 2,
        ..sim::SimConfig::default()
    })
    .await;
    // A Groq model outside the configured pool: off-quota, so only its headers can tell.
    let groq = "groq:gemma2-9b-it";
    assert_eq!(s.run("u1", &[groq, "paid:gpt-4o-mini"]).await, succeeded());
    assert_eq!(s.run("u2", &[groq, "paid:gpt-4o-mini"]).await, succeeded());
    // The second answer said `x-ratelimit-remaining-requests: 0` (the day's) with its reset:
    // the third run goes to the paid provider without asking Groq for the 429.
    assert_eq!(s.run("u3", &[groq, "paid:gpt-4o-mini"]).await, succeeded());
    assert_eq!(
        s.calls(),
        [
            (Provider::Groq, "gsk_platform".into(), 200),
            (Provider::Groq, "gsk_platform".into(), 200),
            (Provider::Generic, "sk-paid-platform".into(), 200),
        ]
    );
    let rests = s.h.rests.list().await.unwrap();
    assert_eq!(rests.len(), 1, "{rests:?}");
    assert_eq!(rests[0].scope, "route");
    assert!(rests[0].reason.starts_with("headroom"), "{rests:?}");
    // Groq's reset-requests: until the day's bucket (two requests, 12 h each) is full again.
    assert!(
        rests[0].remaining_ms > 60_000 && rests[0].remaining_ms <= 86_400_000,
        "until the day's reset: {rests:?}"
    );
}
