//! Failing over between free tiers of different shapes: the engine on one simulator playing
//! OpenRouter, Groq, Gemini and a paid provider at once, with the providers and pools of a
//! configuration file. Assertions read the simulator's call log (which provider, which key) and
//! the rests the fleet holds.

mod support;

use freeway::catalog::Catalog;
use freeway::classify::RestScope;
use freeway::engine::{Outcome, WhenResting};
use freeway::job::{RunJob, RunRequest};
use freeway::provider::{ApiKey, EnvTargets, HttpProvider, Targets, Timeouts};
use freeway::rest::Rests;
use freeway::route::{OPENROUTER_FREE_POOL, RouteSpec};
use freeway::run::RunStatus;
use sim::Provider;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

const OR_FREE: &str = "meta-llama/llama-3.3-70b-instruct:free";
const GROQ_POOL: &str = "groq-llama-70b";

/// The configuration that points freeway at this simulator's providers.
fn catalog(sim: &sim::SimHandle) -> Catalog {
    let openrouter = format!(
        "[providers.openrouter]\nbase_url = \"{}\"\n",
        sim.base_url()
    );
    Catalog::from_toml(&(openrouter + &sim.freeway_config())).expect("a valid configuration")
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
    let sim = sim::start(config, "127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let catalog = Arc::new(catalog(&sim));
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
        let request = RunRequest {
            user_id: user.into(),
            conversation_id: None,
            kind: Default::default(),
            input: Some("hi".into()),
            routes: routes
                .iter()
                .map(|r| RouteSpec::parse_cli(r, &self.catalog))
                .collect(),
            tools: vec![],
            system: None,
            deadline_s: None,
            on_rest: Default::default(),
            regenerate: false,
            idempotency_key: None,
            max_tokens: None,
        };
        let job = RunJob::new(request, freeway::clock::epoch_ms());
        let chain = job.check(&self.catalog).expect("a valid job");
        let outcome = self.h.engine.execute(&job, &chain, WhenResting::Refuse);
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

    // The next run skips the resting OpenRouter pool without a call; Groq's window is spent now,
    // so it fails over to the paid provider.
    assert_eq!(s.run("u2", &CHAIN).await, succeeded());
    assert_eq!(
        s.calls()[2..],
        [
            (Provider::Groq, "gsk_platform".into(), 429),
            (Provider::Generic, "sk-paid-platform".into(), 200),
        ]
    );
    // Groq's 429 came with its per-model `x-ratelimit-*` headers: it rests that model's pool
    // instance, and the OpenRouter pool only rests as long as its own refusal said.
    let groq_instance = format!("{GROQ_POOL}@platform");
    let groq_rest = s.pool_rest_ms(&groq_instance).await;
    assert!(groq_rest.is_some_and(|ms| ms <= 60_000), "{groq_rest:?}");
    let listed: Vec<(String, String)> =
        s.h.rests
            .list()
            .await
            .unwrap()
            .into_iter()
            .map(|r| (r.scope, r.key))
            .collect();
    assert_eq!(
        listed,
        [
            ("pool".to_string(), groq_instance),
            ("pool".to_string(), OPENROUTER_FREE_POOL.to_string()),
        ]
    );

    // With both free pools resting, a run goes straight to the paid provider.
    assert_eq!(s.run("u3", &CHAIN).await, succeeded());
    assert_eq!(
        s.calls()[4..],
        [(Provider::Generic, "sk-paid-platform".into(), 200)]
    );
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
    let secret = freeway::store::SecretKey::from_hex(&"ab".repeat(32)).unwrap();
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
    // The user's window is spent: its 429 rests the user's instance only.
    assert_eq!(s.run("u1", &[own, "paid:gpt-4o-mini"]).await, succeeded());
    assert!(
        s.pool_rest_ms(&format!("{GROQ_POOL}@conn_x"))
            .await
            .is_some()
    );
    assert_eq!(s.pool_rest_ms(&format!("{GROQ_POOL}@platform")).await, None);
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
