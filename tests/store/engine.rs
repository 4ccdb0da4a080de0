//! The real engine on the SQL store: what a duplicated delivery, a refusal, a snooze or an early
//! end leaves in it, and where a user's key may end up.

use crate::{SECRET_HEX, call, contains, fresh, only, support, unique};
use async_trait::async_trait;
use freeway::catalog::Catalog;
use freeway::chat::{Message, ToolSpec};
use freeway::classify::{RestLength, RestScope, Verdict};
use freeway::clock::{InstantClock, epoch_ms};
use freeway::engine::{Engine, Outcome, WhenResting};
use freeway::events::{Event, MemoryEvents};
use freeway::fleet::Fleet;
use freeway::headers::Headers;
use freeway::job::{RunJob, RunRequest};
use freeway::provider::{
    ApiKey, CallError, ChatProvider, ChatRequest, Completion, Deltas, EnvTargets, HttpProvider,
    Target, TargetError, Targets, Timeouts,
};
use freeway::rest::{MemoryRests, Rests};
use freeway::route::{OPENROUTER_FREE_POOL, Route, RouteSpec};
use freeway::run::{Code, RunStatus};
use freeway::store::{Backend, NewConnection, SecretKey, SqlStore, Store, StoreTargets};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Answers at once with a scripted outcome (then plain answers), counting calls.
#[derive(Default)]
struct Scripted {
    script: Mutex<VecDeque<Result<Completion, CallError>>>,
    calls: Mutex<u32>,
}

impl Scripted {
    fn with(script: Vec<Result<Completion, CallError>>) -> Arc<Scripted> {
        Arc::new(Scripted {
            script: Mutex::new(script.into()),
            calls: Mutex::new(0),
        })
    }
}

fn answer(text: &str) -> Result<Completion, CallError> {
    Ok(Completion {
        text: text.into(),
        finish_reason: Some("stop".into()),
        ..Default::default()
    })
}

fn tool_step(text: &str, id: &str) -> Result<Completion, CallError> {
    Ok(Completion {
        text: text.into(),
        tool_calls: vec![call(id)],
        finish_reason: Some("tool_calls".into()),
        ..Default::default()
    })
}

fn account_429() -> Result<Completion, CallError> {
    let headers: Headers = [("X-RateLimit-Limit", "20"), ("X-RateLimit-Remaining", "0")]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Err(CallError::Http {
        status: 429,
        headers,
        body: concat!(
            r#"{"error":{"message":"Rate limit exceeded: free-models-per-min.","code":429,"#,
            r#""metadata":{"limit_source":"openrouter_free_tier_per_minute"}}}"#
        )
        .into(),
    })
}

#[async_trait]
impl ChatProvider for Scripted {
    async fn call(
        &self,
        _t: &Target,
        _r: &ChatRequest,
        deltas: &Deltas,
    ) -> Result<Completion, CallError> {
        *self.calls.lock().unwrap() += 1;
        let next = self
            .script
            .lock()
            .unwrap()
            .pop_front()
            .unwrap_or_else(|| answer("answer"));
        if let Ok(c) = &next {
            deltas.push(&c.text);
        }
        next
    }
}

struct Rig {
    engine: Engine,
    store: SqlStore,
    rests: Arc<MemoryRests>,
    /// The limiter's clock: moved to the pool's next window when the pool wakes.
    pace_clock: Arc<freeway::clock::InstantClock>,
    events: Arc<MemoryEvents>,
}

fn rig(
    store: &SqlStore,
    provider: Arc<dyn ChatProvider>,
    targets: Arc<dyn Targets>,
    fleet: Fleet,
) -> Engine {
    Engine::new(
        provider,
        targets,
        Arc::new(store.clone()) as Arc<dyn Store>,
        fleet,
    )
    .with_clock(Arc::new(InstantClock::default()))
    .named("store-suite")
}

fn engine_on(store: &SqlStore, provider: Arc<dyn ChatProvider>) -> Rig {
    let events = Arc::new(MemoryEvents::default());
    let rests = Arc::new(MemoryRests::default());
    let targets = Arc::new(EnvTargets::openrouter(
        "http://127.0.0.1:9",
        Some(ApiKey::new("sk-platform")),
    ));
    let pace_clock = Arc::new(freeway::clock::InstantClock::default());
    let fleet = Fleet {
        rests: rests.clone(),
        events: events.clone(),
        pace: Arc::new(freeway::pace::MemoryPacer::new(pace_clock.clone())),
        ..Fleet::in_memory()
    };
    Rig {
        pace_clock,
        engine: rig(store, provider, targets, fleet),
        store: store.clone(),
        rests,
        events,
    }
}

pub(crate) fn job(
    conversation_id: &str,
    input: Option<&str>,
    regenerate: bool,
    models: &[&str],
) -> (RunJob, Vec<Route>) {
    let request = RunRequest {
        input: input.map(str::to_string),
        conversation_id: Some(conversation_id.into()),
        tools: vec![ToolSpec {
            name: "lookup".into(),
            description: String::new(),
            parameters: serde_json::json!({"type": "object"}),
            approval: Default::default(),
        }],
        regenerate,
        ..RunRequest::new(
            "u1",
            "",
            models
                .iter()
                .map(|m| RouteSpec::parse_cli(m, &Catalog::builtin()))
                .collect(),
        )
    };
    let job = RunJob::new(request, epoch_ms());
    let routes = job.check(&Catalog::builtin()).expect("a valid job");
    (job, routes)
}

const FREE: &str = "vendor/m:free";

impl Rig {
    async fn rest_the_pool(&self) {
        self.rests
            .write(
                &RestScope::Pool(OPENROUTER_FREE_POOL.into()),
                RestLength::For(120_000),
                "test",
            )
            .await
            .unwrap();
    }
    /// The pool's rest ends and its next window comes (a refusal filled this one).
    async fn wake_the_pool(&self) {
        self.rests
            .clear("pool", OPENROUTER_FREE_POOL)
            .await
            .unwrap();
        self.pace_clock.advance(std::time::Duration::from_secs(61));
    }
    async fn seed(&self, conv: &str) -> Vec<Message> {
        let seed = vec![
            Message::user("q1"),
            Message::assistant(Some("a1".into()), vec![]),
        ];
        for (i, m) in seed.iter().enumerate() {
            self.store
                .append_message(conv, "run_seed", &format!("k{i}"), m)
                .await
                .unwrap();
        }
        seed
    }
}

#[tokio::test]
async fn a_duplicated_delivery_appends_the_user_message_once() {
    for db in fresh("engine-duplicate").await {
        let provider = Scripted::with(vec![]);
        let rig = engine_on(&db.store, provider.clone());
        let conv = unique("conv");
        let (job, routes) = job(&conv, Some("hello"), false, &[FREE]);
        // Two deliveries of the same job at once (a redelivery while the first still runs)…
        let (a, b) = tokio::join!(
            rig.engine.execute(&job, &routes, WhenResting::Refuse),
            rig.engine.execute(&job, &routes, WhenResting::Refuse)
        );
        for o in [a.unwrap(), b.unwrap()] {
            assert!(
                matches!(
                    o,
                    Outcome::Finished {
                        status: RunStatus::Succeeded,
                        ..
                    } | Outcome::Skipped(_)
                        | Outcome::Busy { .. }
                ),
                "{}: {o:?}",
                db.label
            );
        }
        // …and one after it finished.
        let third = rig
            .engine
            .execute(&job, &routes, WhenResting::Refuse)
            .await
            .unwrap();
        assert_eq!(
            third,
            Outcome::Skipped(RunStatus::Succeeded),
            "{}",
            db.label
        );
        let transcript = db.store.transcript(&conv).await.unwrap();
        let users: Vec<_> = transcript
            .iter()
            .filter(|m| m.content.as_deref() == Some("hello"))
            .collect();
        assert_eq!(users.len(), 1, "{}: {transcript:?}", db.label);
        assert_eq!(
            transcript.len(),
            2,
            "{}: one user message, one answer: {transcript:?}",
            db.label
        );
        // One executor at a time (the run's lease): the concurrent delivery made no call.
        assert_eq!(*provider.calls.lock().unwrap(), 1, "{}", db.label);
        db.finish().await;
    }
}

#[tokio::test]
async fn a_refused_run_leaves_the_transcript_untouched() {
    for db in fresh("engine-refused").await {
        let provider = Scripted::with(vec![]);
        let rig = engine_on(&db.store, provider.clone());
        let conv = unique("conv");
        let seed = rig.seed(&conv).await;
        rig.rest_the_pool().await;
        let (ask, routes) = job(&conv, Some("q2"), false, &[FREE]);
        let outcome = rig
            .engine
            .execute(&ask, &routes, WhenResting::Refuse)
            .await
            .unwrap();
        assert!(
            matches!(
                outcome,
                Outcome::Refused {
                    code: Code::AccountResting,
                    ..
                }
            ),
            "{}: {outcome:?}",
            db.label
        );
        assert_eq!(
            db.store.transcript(&conv).await.unwrap(),
            seed,
            "{}: a refused run writes nothing",
            db.label
        );
        let rec = db.store.run(&ask.run_id).await.unwrap().unwrap();
        assert_eq!(
            (rec.status, rec.code, rec.state.input_applied),
            (RunStatus::Refused, Some(Code::AccountResting), false)
        );
        // A regenerate refused by pre-flight does not delete the turn it would replace…
        let (regen, routes) = job(&conv, None, true, &[FREE]);
        let outcome = rig
            .engine
            .execute(&regen, &routes, WhenResting::Refuse)
            .await
            .unwrap();
        assert!(matches!(outcome, Outcome::Refused { .. }), "{outcome:?}");
        assert_eq!(
            db.store.transcript(&conv).await.unwrap(),
            seed,
            "{}: the last turn survives a refusal",
            db.label
        );
        assert_eq!(*provider.calls.lock().unwrap(), 0);
        // …and replaces it once pre-flight passes.
        rig.wake_the_pool().await;
        let (regen, routes) = job(&conv, None, true, &[FREE]);
        let outcome = rig
            .engine
            .execute(&regen, &routes, WhenResting::Refuse)
            .await
            .unwrap();
        assert!(
            matches!(
                outcome,
                Outcome::Finished {
                    status: RunStatus::Succeeded,
                    ..
                }
            ),
            "{outcome:?}"
        );
        let after = db.store.transcript(&conv).await.unwrap();
        assert_eq!(
            after,
            vec![
                Message::user("q1"),
                Message::assistant(Some("answer".into()), vec![])
            ],
            "{}",
            db.label
        );
        db.finish().await;
    }
}

#[tokio::test]
async fn a_snoozed_run_resumes_with_its_counters() {
    for db in fresh("engine-snooze").await {
        let provider = Scripted::with(vec![account_429()]);
        let rig = engine_on(&db.store, provider.clone());
        let conv = unique("conv");
        let (job, routes) = job(&conv, Some("hello"), false, &[FREE]);
        let first = rig
            .engine
            .execute(&job, &routes, WhenResting::Snooze)
            .await
            .unwrap();
        assert!(
            matches!(first, Outcome::Snoozed { .. }),
            "{}: {first:?}",
            db.label
        );
        let snoozed = db.store.run(&job.run_id).await.unwrap().unwrap();
        assert_eq!(snoozed.status, RunStatus::Delayed);
        assert_eq!(
            (
                snoozed.state.counters.calls,
                snoozed.state.counters.step1_attempts,
                snoozed.state.snoozes
            ),
            (1, 1, 1)
        );
        // The pool reopens; the re-pushed job runs in a new delivery that starts from the store.
        rig.wake_the_pool().await;
        let second = rig
            .engine
            .execute(&job, &routes, WhenResting::Snooze)
            .await
            .unwrap();
        assert!(
            matches!(
                second,
                Outcome::Finished {
                    status: RunStatus::Succeeded,
                    ..
                }
            ),
            "{}: {second:?}",
            db.label
        );
        let done = db.store.run(&job.run_id).await.unwrap().unwrap();
        assert_eq!(
            (
                done.state.counters.calls,
                done.state.counters.step1_attempts,
                done.state.snoozes
            ),
            (2, 2, 1),
            "{}",
            db.label
        );
        let attempts = db.store.attempts(&job.run_id).await.unwrap();
        assert_eq!(
            attempts
                .iter()
                .map(|a| (a.n, a.http_status, a.verdict))
                .collect::<Vec<_>>(),
            vec![(1, Some(429), Some(Verdict::Account)), (2, Some(200), None)]
        );
        assert_eq!(attempts[0].ratelimit_remaining, Some(0), "{}", db.label);
        let users = db
            .store
            .transcript(&conv)
            .await
            .unwrap()
            .iter()
            .filter(|m| m.content.as_deref() == Some("hello"))
            .count();
        assert_eq!(users, 1, "{}", db.label);
        db.finish().await;
    }
}

#[tokio::test]
async fn a_run_that_ends_early_keeps_its_partial_output_marked_incomplete() {
    for db in fresh("engine-partial").await {
        let script = (1..=5)
            .map(|i| tool_step(&format!("thinking {i}"), &format!("call_{i}")))
            .collect();
        let rig = engine_on(&db.store, Scripted::with(script));
        let conv = unique("conv");
        let (job, routes) = job(&conv, Some("dig"), false, &[FREE]);
        let outcome = rig
            .engine
            .execute(&job, &routes, WhenResting::Refuse)
            .await
            .unwrap();
        assert_eq!(
            outcome,
            Outcome::Finished {
                status: RunStatus::Failed,
                code: Some(Code::BudgetExhausted)
            },
            "{}",
            db.label
        );
        let rec = db.store.run(&job.run_id).await.unwrap().unwrap();
        assert_eq!(
            (rec.output.as_str(), rec.incomplete),
            ("thinking 5", true),
            "{}",
            db.label
        );
        let transcript = db.store.transcript(&conv).await.unwrap();
        assert_eq!(
            transcript.len(),
            1 + 5 + 4,
            "{}: the input, five steps, four tool results",
            db.label
        );
        assert_eq!(transcript[1].tool_calls, vec![call("call_1")]);
        assert_eq!(transcript[2].tool_call_id.as_deref(), Some("call_1"));
        assert!(
            rig.events
                .of(&job.run_id)
                .iter()
                .any(|e| matches!(e, Event::Finished { .. }))
        );
        db.finish().await;
    }
}

/// Everything a tracing subscriber writes, for looking for secrets in log lines.
#[derive(Clone, Default)]
struct LogBuffer(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for LogBuffer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Every key of a Redis namespace with its contents, as text.
async fn redis_dump(ns: &str) -> String {
    let mut conn = support::skip::redis()
        .await
        .expect("the Redis this test used");
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{ns}:*"))
        .query_async(&mut conn)
        .await
        .unwrap();
    let mut text = String::new();
    for key in keys {
        let kind: String = redis::cmd("TYPE")
            .arg(&key)
            .query_async(&mut conn)
            .await
            .unwrap();
        let value: redis::Value = match kind.as_str() {
            "string" => redis::cmd("GET")
                .arg(&key)
                .query_async(&mut conn)
                .await
                .unwrap(),
            "zset" => redis::cmd("ZRANGE")
                .arg(&key)
                .arg(0)
                .arg(-1)
                .arg("WITHSCORES")
                .query_async(&mut conn)
                .await
                .unwrap(),
            "hash" => redis::cmd("HGETALL")
                .arg(&key)
                .query_async(&mut conn)
                .await
                .unwrap(),
            "stream" => redis::cmd("XRANGE")
                .arg(&key)
                .arg("-")
                .arg("+")
                .query_async(&mut conn)
                .await
                .unwrap(),
            "set" => redis::cmd("SMEMBERS")
                .arg(&key)
                .query_async(&mut conn)
                .await
                .unwrap(),
            "list" => redis::cmd("LRANGE")
                .arg(&key)
                .arg(0)
                .arg(-1)
                .query_async(&mut conn)
                .await
                .unwrap(),
            other => panic!("unexpected Redis type {other} at {key}"),
        };
        text.push_str(&format!("{key} {value:?}\n"));
    }
    text
}

#[tokio::test]
async fn a_user_connection_is_opened_at_call_time_and_its_key_leaks_nowhere() {
    let secret = SecretKey::from_hex(SECRET_HEX).unwrap();
    let logs = LogBuffer::default();
    let writer = logs.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    for db in fresh("engine-connection").await {
        let raw = unique("sk-user-RAWKEY");
        let conn_id = unique("conn");
        let c = NewConnection {
            id: conn_id.clone(),
            user_id: "u1".into(),
            provider: "openrouter".into(),
            api_key: ApiKey::new(raw.clone()),
        };
        db.store
            .put_connection(&secret, &c, &Catalog::builtin())
            .await
            .unwrap();

        let sim = sim::start(sim::SimConfig::default(), "127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        sim.inject(sim::FaultSpec::new(sim::FaultKind::Upstream429));
        let timeouts = Timeouts {
            connect: Duration::from_secs(2),
            first_byte: Duration::from_secs(5),
            idle: Duration::from_secs(5),
            total: Duration::from_secs(10),
        };
        let provider = Arc::new(HttpProvider::new(timeouts).unwrap());
        let env = EnvTargets::openrouter(&sim.base_url(), Some(ApiKey::new("sk-platform")));
        let targets = Arc::new(StoreTargets::new(
            env,
            db.store.clone(),
            Some(only(&secret)),
        ));
        let Some(redis_conn) = support::skip::redis().await else {
            return;
        };
        let ns = support::unique_ns("leak");
        let engine = rig(&db.store, provider, targets, Fleet::redis(&redis_conn, &ns));

        let conv = unique("conv");
        let first = format!("vendor/paid-a@{conn_id}");
        let second = format!("vendor/paid-b@{conn_id}");
        let (job, routes) = job(&conv, Some("hello"), false, &[&first, &second]);
        let outcome = engine
            .execute(&job, &routes, WhenResting::Refuse)
            .await
            .unwrap();
        assert!(
            matches!(
                outcome,
                Outcome::Finished {
                    status: RunStatus::Succeeded,
                    ..
                }
            ),
            "{}: {outcome:?}",
            db.label
        );

        let calls = sim.calls();
        assert_eq!(calls.len(), 2, "{}: a 429 then an answer", db.label);
        assert!(
            calls.iter().all(|c| c.key == raw),
            "{}: the sim got the user's own key",
            db.label
        );
        let payload = serde_json::to_string(&job).unwrap();
        assert!(
            payload.contains(&conn_id) && !payload.contains(&raw),
            "the job names only the connection"
        );
        let redis = redis_dump(&ns).await;
        assert!(
            redis.contains(&conn_id),
            "{}: the rest and the events name the connection: {redis}",
            db.label
        );
        assert!(
            !redis.contains(&raw),
            "{}: the raw key is in Redis: {redis}",
            db.label
        );
        match db.store.backend() {
            Backend::Sqlite => assert!(
                !contains(&db.sqlite_bytes(), raw.as_bytes()),
                "the raw key is in the SQLite files"
            ),
            Backend::Postgres => {
                for table in [
                    "connections",
                    "runs",
                    "attempts",
                    "messages",
                    "conversations",
                ] {
                    assert!(
                        !db.pg_rows(table).await.contains(&raw),
                        "the raw key is in {table}"
                    );
                }
            }
        }
        sim.shutdown().await;

        // Without FREEWAY_SECRET_KEY the keys cannot be opened: an infrastructure fault, not the
        // connection's.
        let no_secret = StoreTargets::new(
            EnvTargets::openrouter("http://127.0.0.1:9", None),
            db.store.clone(),
            None,
        );
        let route = Route::parse(&first, &Catalog::builtin()).unwrap();
        let err = no_secret.target(&route, "u1").await.unwrap_err();
        assert!(matches!(err, TargetError::Unavailable(_)), "{err:?}");
        assert!(
            err.to_string().contains("FREEWAY_SECRET_KEY"),
            "says why: {err}"
        );
        let missing = Route::parse("m@conn_missing", &Catalog::builtin()).unwrap();
        let with_secret = StoreTargets::new(
            EnvTargets::openrouter("http://127.0.0.1:9", None),
            db.store.clone(),
            Some(only(&secret)),
        );
        assert_eq!(
            with_secret.target(&missing, "u1").await.unwrap_err(),
            TargetError::UnknownConnection("conn_missing".into())
        );
        assert!(with_secret.target(&route, "u1").await.is_ok());
        assert_eq!(
            with_secret.target(&route, "u2").await.unwrap_err(),
            TargetError::UnknownConnection(conn_id.clone()),
            "{}: another user's run cannot open u1's connection",
            db.label
        );
        db.finish().await;
    }
    let logs = String::from_utf8_lossy(&logs.0.lock().unwrap()).into_owned();
    assert!(!logs.contains("RAWKEY"), "a raw key is in the logs: {logs}");
}
