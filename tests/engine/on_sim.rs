//! The run rules of docs/design.md §2.2–§2.4 and the rests of §3, end to end: the engine calls the
//! simulator over real HTTP and shares rests through the in-process fleet (the Redis one keeps
//! the same rules: `tests/fleet/rests.rs` runs one suite on both). Assertions read the simulator's call
//! log, the rests the fleet holds and the run records.

use crate::support;

use async_trait::async_trait;
use freeway::budget::Kind;
use freeway::catalog::Catalog;
use freeway::chat::{Approval, ToolCall, ToolSpec};
use freeway::classify::{RestLength, RestScope, Verdict};
use freeway::engine::{Outcome, WhenResting};
use freeway::events::Event;
use freeway::job::{Continuation, RunJob, RunRequest};
use freeway::lease::Leases;
use freeway::provider::{
    CallError, ChatProvider, ChatRequest, Completion, Deltas, HttpProvider, Target, Timeouts,
};
use freeway::rest::{MemoryRests, RestKind, Rests};
use freeway::route::{OPENROUTER_FREE_POOL, Route, RouteSpec};
use freeway::run::{Code, RunStatus};
use freeway::store::Store;
use std::sync::Arc;
use std::time::Duration;
use support::Harness;

const FREE_A: &str = "meta-llama/llama-3.3-70b-instruct:free";
const FREE_B: &str = "qwen/qwen3-coder:free";
const FREE_C: &str = "deepseek/deepseek-chat-v3-0324:free";
const PAID: &str = "openai/gpt-4o-mini";

struct Setup {
    sim: sim::SimHandle,
    h: Harness,
}

async fn setup() -> Setup {
    setup_with(sim::SimConfig::default(), |p| p).await
}

async fn setup_with(
    config: sim::SimConfig,
    wrap: impl FnOnce(Arc<dyn ChatProvider>) -> Arc<dyn ChatProvider>,
) -> Setup {
    let sim = sim::start(config, "127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let provider: Arc<dyn ChatProvider> = Arc::new(HttpProvider::new(fast_timeouts()).unwrap());
    let h = support::harness(wrap(provider), &sim.base_url());
    Setup { sim, h }
}

/// A default simulator and the clock and rests of a harness whose provider a test wraps (to act
/// as another replica in the middle of a call).
async fn sim_with_clock_and_rests() -> (
    sim::SimHandle,
    Arc<freeway::clock::InstantClock>,
    Arc<MemoryRests>,
) {
    let sim = sim::start(sim::SimConfig::default(), "127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let clock = Arc::new(freeway::clock::InstantClock::default());
    let rests = Arc::new(MemoryRests::new(clock.clone()));
    (sim, clock, rests)
}

fn fast_timeouts() -> Timeouts {
    Timeouts {
        connect: Duration::from_secs(2),
        first_byte: Duration::from_secs(2),
        idle: Duration::from_secs(2),
        total: Duration::from_secs(10),
    }
}

fn fault(spec: serde_json::Value) -> sim::FaultSpec {
    serde_json::from_value(spec).expect("a fault the sim understands")
}

fn request(user: &str, input: &str, models: &[&str]) -> RunRequest {
    RunRequest {
        tools: vec![tool("lookup", Approval::None)],
        ..RunRequest::new(
            user,
            input,
            models
                .iter()
                .map(|m| RouteSpec::parse_cli(m, &Catalog::builtin()))
                .collect(),
        )
    }
}

fn tool(name: &str, approval: Approval) -> ToolSpec {
    ToolSpec {
        name: name.into(),
        description: "a tool".into(),
        parameters: serde_json::json!({"type":"object"}),
        approval,
    }
}

async fn run(h: &Harness, req: RunRequest, when: WhenResting) -> (RunJob, Outcome) {
    let job = RunJob::new(req, freeway::clock::epoch_ms());
    let outcome = execute(h, &job, when).await;
    (job, outcome)
}

async fn execute(h: &Harness, job: &RunJob, when: WhenResting) -> Outcome {
    let routes = job.check(&Catalog::builtin()).unwrap();
    h.engine.execute(job, &routes, when).await.unwrap()
}

/// The models the sim was called with, in order.
fn called(sim: &sim::SimHandle) -> Vec<String> {
    sim.calls().into_iter().map(|c| c.model).collect()
}

/// The remaining ms of `scope`'s rest, -2 when it does not rest (as Redis `PTTL` says).
async fn pttl(h: &Harness, scope: RestScope) -> i64 {
    let remaining = h.rests.remaining(&scope).await.unwrap();
    remaining.map_or(-2, |ms| ms as i64)
}

fn pool_scope() -> RestScope {
    RestScope::Pool(OPENROUTER_FREE_POOL.into())
}

fn route_scope(model: &str) -> RestScope {
    let route = Route::parse(model, &Catalog::builtin()).unwrap();
    RestScope::Route {
        pool: route.pool.clone(),
        route_key: route.key(),
    }
}

/// Change the sim's per-minute quota through its control API.
async fn set_rpm(sim: &sim::SimHandle, rpm: u32) {
    let url = sim.base_url().replace("/api/v1", "/_sim/config");
    let body = serde_json::json!({ "rpm": rpm }).to_string();
    let response = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    assert!(response.status().is_success());
}

/// A sim whose shared free quota is already spent for this minute.
fn exhausted_quota() -> sim::SimConfig {
    sim::SimConfig {
        rpm: 0,
        ..sim::SimConfig::default()
    }
}

fn finished(status: RunStatus, code: Option<Code>) -> Outcome {
    Outcome::Finished { status, code }
}

#[tokio::test]
async fn an_account_429_skips_the_other_free_routes_and_rests_the_pool_for_every_run() {
    let s = setup_with(exhausted_quota(), |p| p).await;
    let (_, outcome) = run(
        &s.h,
        request("u1", "hi", &[FREE_A, FREE_B, PAID]),
        WhenResting::Snooze,
    )
    .await;
    assert_eq!(outcome, finished(RunStatus::Succeeded, None));
    assert_eq!(
        called(&s.sim),
        vec![FREE_A, PAID],
        "A, then straight to the paid route"
    );
    let ttl = pttl(&s.h, pool_scope()).await;
    assert!(
        ttl > 0 && ttl <= 300_000,
        "the pool rests, at most 300 s: {ttl}"
    );

    let (_, outcome) = run(
        &s.h,
        request("u2", "again", &[FREE_B, FREE_C]),
        WhenResting::Refuse,
    )
    .await;
    match outcome {
        Outcome::Refused {
            code: Code::AccountResting,
            retry_after_s,
        } => assert!((1..=300).contains(&retry_after_s)),
        other => panic!("a later all-free run is refused: {other:?}"),
    }
    assert_eq!(s.sim.calls().len(), 2, "the refused run made no call");
}

#[tokio::test]
async fn a_provider_429_rests_that_route_alone_and_the_next_free_route_is_called() {
    let s = setup().await;
    s.sim.inject(fault(
        serde_json::json!({"kind": "upstream_429", "model": FREE_A, "retry_after_s": 17}),
    ));
    let (job, outcome) = run(
        &s.h,
        request("u1", "hi", &[FREE_A, FREE_B, PAID]),
        WhenResting::Snooze,
    )
    .await;
    assert_eq!(outcome, finished(RunStatus::Succeeded, None));
    assert_eq!(called(&s.sim), vec![FREE_A, FREE_B]);
    let ttl = pttl(&s.h, route_scope(FREE_A)).await;
    assert!(
        ttl > 15_000 && ttl <= 17_000,
        "A rests for its Retry-After: {ttl}"
    );
    assert_eq!(pttl(&s.h, pool_scope()).await, -2, "the pool does not rest");

    let attempts = s.h.store.attempts(&job.run_id).await.unwrap();
    assert_eq!(attempts.len(), 2, "one attempt record per call");
    assert_eq!(attempts[0].http_status, Some(429));
    assert_eq!(attempts[0].verdict, Some(Verdict::Provider));
    assert_eq!(attempts[0].retry_hint_ms, Some(17_000));
    assert_eq!(attempts[0].provider_name.as_deref(), Some("Chutes"));
    assert_eq!(
        (attempts[1].http_status, attempts[1].verdict),
        (Some(200), None)
    );
    let events = s.h.events.of(&job.run_id);
    assert!(events.iter().any(|e| matches!(e, Event::Failover { verdict, to: Some(to), .. } if *verdict == Verdict::Provider && to.ends_with(FREE_B))));
}

#[tokio::test]
async fn an_ambiguous_429_stops_the_walk_over_shared_routes() {
    let s = setup().await;
    s.sim.inject(fault(
        serde_json::json!({"kind": "generic_429", "model": FREE_A}),
    ));
    let (_, outcome) = run(
        &s.h,
        request("u1", "hi", &[FREE_A, FREE_B, PAID]),
        WhenResting::Snooze,
    )
    .await;
    assert_eq!(outcome, finished(RunStatus::Succeeded, None));
    assert_eq!(
        called(&s.sim),
        vec![FREE_A, PAID],
        "B is shared: skipped after an ambiguous stop"
    );
    let ttl = pttl(&s.h, route_scope(FREE_A)).await;
    assert!(ttl > 55_000 && ttl <= 60_000, "A rests 60 s: {ttl}");
    assert_eq!(
        pttl(&s.h, pool_scope()).await,
        -2,
        "one ambiguous failure does not rest the pool"
    );
}

#[tokio::test]
async fn ambiguous_429s_from_three_runs_of_two_users_rest_the_pool() {
    let s = setup().await;
    for model in [FREE_A, FREE_B, FREE_C] {
        s.sim.inject(fault(
            serde_json::json!({"kind": "generic_429", "model": model}),
        ));
    }
    let runs = [("u1", FREE_A), ("u1", FREE_B), ("u2", FREE_C)];
    for (i, (user, model)) in runs.into_iter().enumerate() {
        assert_eq!(
            pttl(&s.h, pool_scope()).await,
            -2,
            "no pool rest before the third failure"
        );
        let (_, outcome) = run(
            &s.h,
            request(user, "hi", &[model, PAID]),
            WhenResting::Snooze,
        )
        .await;
        assert_eq!(
            outcome,
            finished(RunStatus::Succeeded, None),
            "run {i} completes on the paid route"
        );
    }
    let ttl = pttl(&s.h, pool_scope()).await;
    assert!(
        ttl > 55_000 && ttl <= 60_000,
        "3 failures from 2 users in 30 s rest the pool 60 s: {ttl}"
    );
}

#[tokio::test]
async fn ambiguous_429s_from_one_user_do_not_rest_the_pool() {
    let s = setup().await;
    for model in [FREE_A, FREE_B, FREE_C] {
        s.sim.inject(fault(
            serde_json::json!({"kind": "generic_429", "model": model}),
        ));
        let (_, outcome) = run(
            &s.h,
            request("u1", "hi", &[model, PAID]),
            WhenResting::Snooze,
        )
        .await;
        assert_eq!(outcome, finished(RunStatus::Succeeded, None));
    }
    assert_eq!(pttl(&s.h, pool_scope()).await, -2);
}

#[tokio::test]
async fn a_one_route_chain_retries_once_on_a_5xx_after_one_to_three_seconds() {
    let s = setup().await;
    s.sim.inject(fault(
        serde_json::json!({"kind": "bad_gateway_502", "model": PAID}),
    ));
    let (_, outcome) = run(&s.h, request("u1", "hi", &[PAID]), WhenResting::Snooze).await;
    assert_eq!(outcome, finished(RunStatus::Succeeded, None));
    assert_eq!(called(&s.sim), vec![PAID, PAID]);
    let slept = s.h.clock.slept();
    assert_eq!(slept.len(), 1);
    assert!(
        slept[0] >= Duration::from_secs(1) && slept[0] <= Duration::from_secs(3),
        "{slept:?}"
    );
}

#[tokio::test]
async fn a_second_5xx_on_a_one_route_chain_ends_the_run() {
    let s = setup().await;
    s.sim.inject(fault(
        serde_json::json!({"kind": "server_500", "model": PAID, "count": 2}),
    ));
    let (_, outcome) = run(&s.h, request("u1", "hi", &[PAID]), WhenResting::Snooze).await;
    assert_eq!(
        outcome,
        finished(RunStatus::Failed, Some(Code::RoutesExhausted))
    );
    assert_eq!(s.sim.calls().len(), 2, "one retry, no more");
}

#[tokio::test]
async fn complete_never_retries_the_same_route() {
    let s = setup().await;
    s.sim.inject(fault(
        serde_json::json!({"kind": "bad_gateway_502", "model": PAID}),
    ));
    let mut req = request("u1", "hi", &[PAID]);
    req.kind = Kind::Complete;
    let (_, outcome) = run(&s.h, req, WhenResting::Snooze).await;
    assert_eq!(
        outcome,
        finished(RunStatus::Failed, Some(Code::RoutesExhausted))
    );
    assert_eq!(s.sim.calls().len(), 1);
    assert!(s.h.clock.slept().is_empty());
}

#[tokio::test]
async fn no_same_route_retry_into_a_resting_pool() {
    // Another replica rests the pool while this run's only call fails with a 502.
    struct RestThePoolOn502 {
        inner: Arc<dyn ChatProvider>,
        rests: Arc<MemoryRests>,
    }
    #[async_trait]
    impl ChatProvider for RestThePoolOn502 {
        async fn call(
            &self,
            t: &Target,
            r: &ChatRequest,
            d: &Deltas,
        ) -> Result<Completion, CallError> {
            let result = self.inner.call(t, r, d).await;
            let scope = RestScope::Pool(OPENROUTER_FREE_POOL.into());
            self.rests
                .write(&scope, RestLength::For(30_000), "another replica")
                .await
                .unwrap();
            result
        }
    }
    let (sim, clock, rests) = sim_with_clock_and_rests().await;
    let provider = Arc::new(RestThePoolOn502 {
        inner: Arc::new(HttpProvider::new(fast_timeouts()).unwrap()),
        rests: rests.clone(),
    });
    let h = support::harness_with(provider, &sim.base_url(), clock, rests);
    sim.inject(fault(
        serde_json::json!({"kind": "bad_gateway_502", "model": FREE_A}),
    ));
    let (_, outcome) = run(&h, request("u1", "hi", &[FREE_A]), WhenResting::Refuse).await;
    assert_eq!(sim.calls().len(), 1, "no retry into a resting pool");
    assert_eq!(
        outcome,
        finished(RunStatus::Failed, Some(Code::RoutesExhausted))
    );
}

#[tokio::test]
async fn a_run_whose_chain_is_closed_only_by_rate_limits_snoozes_with_its_budget() {
    let s = setup_with(exhausted_quota(), |p| p).await;
    let (job, outcome) = run(
        &s.h,
        request("u1", "hi", &[FREE_A, FREE_B]),
        WhenResting::Snooze,
    )
    .await;
    let Outcome::Snoozed { until_ms, .. } = outcome else {
        panic!("snoozed, got {outcome:?}")
    };
    let now = freeway::clock::epoch_ms();
    assert!(
        until_ms > now && until_ms <= now + 302_000,
        "until the pool reopens, plus at most 2 s"
    );
    assert_eq!(
        s.sim.calls().len(),
        1,
        "A was called once; B was closed by the pool rest"
    );
    let rec = s.h.store.run(&job.run_id).await.unwrap().unwrap();
    assert_eq!(rec.status, RunStatus::Delayed);
    assert_eq!(
        rec.state.counters.step1_attempts, 1,
        "the budget travels with the run"
    );
    assert!(
        s.h.events
            .of(&job.run_id)
            .iter()
            .any(|e| matches!(e, Event::Delayed { .. }))
    );

    // The pool reopens (an operator clear, and the next window) and the quota is back.
    s.h.rests.clear("pool", OPENROUTER_FREE_POOL).await.unwrap();
    s.h.clock.advance(Duration::from_secs(61));
    set_rpm(&s.sim, 20).await;
    let outcome = execute(&s.h, &job, WhenResting::Snooze).await;
    assert_eq!(outcome, finished(RunStatus::Succeeded, None));
    let rec = s.h.store.run(&job.run_id).await.unwrap().unwrap();
    assert_eq!(
        rec.state.counters.calls, 2,
        "one call before the snooze, one after"
    );
    let transcript = s.h.store.transcript(&job.conversation_id).await.unwrap();
    assert_eq!(
        transcript
            .iter()
            .filter(|m| m.role == freeway::chat::Role::User)
            .count(),
        1,
        "the user message once"
    );
}

#[tokio::test]
async fn preflight_refuses_an_all_closed_chain_before_the_transcript_is_touched() {
    let s = setup().await;
    s.h.rests
        .write(
            &RestScope::Pool(OPENROUTER_FREE_POOL.into()),
            RestLength::For(40_000),
            "test",
        )
        .await
        .unwrap();
    let (job, outcome) = run(
        &s.h,
        request("u1", "hi", &[FREE_A, FREE_B]),
        WhenResting::Snooze,
    )
    .await;
    // With a 600 s deadline the queue would snooze; run-one refuses.
    assert!(matches!(outcome, Outcome::Snoozed { .. }), "{outcome:?}");
    assert!(
        s.h.store
            .transcript(&job.conversation_id)
            .await
            .unwrap()
            .is_empty()
    );

    let mut short = request("u1", "hi", &[FREE_A, FREE_B]);
    short.deadline_s = Some(5);
    let (job, outcome) = run(&s.h, short, WhenResting::Snooze).await;
    assert!(
        matches!(outcome, Outcome::Refused { code: Code::AccountResting, retry_after_s } if retry_after_s > 30),
        "{outcome:?}"
    );
    assert!(
        s.h.store
            .transcript(&job.conversation_id)
            .await
            .unwrap()
            .is_empty(),
        "nothing written"
    );
    assert!(s.sim.calls().is_empty());

    let (_, outcome) = run(
        &s.h,
        request("u1", "hi", &[FREE_A, PAID]),
        WhenResting::Refuse,
    )
    .await;
    assert_eq!(
        outcome,
        finished(RunStatus::Succeeded, None),
        "a paid route stays usable while the pool rests"
    );
    assert_eq!(called(&s.sim), vec![PAID]);
}

/// Every request's messages, in order, then the call as made.
struct RecordMessages {
    inner: Arc<dyn ChatProvider>,
    sent: Arc<std::sync::Mutex<Vec<Vec<freeway::chat::Message>>>>,
}

#[async_trait]
impl ChatProvider for RecordMessages {
    async fn call(&self, t: &Target, r: &ChatRequest, d: &Deltas) -> Result<Completion, CallError> {
        self.sent.lock().unwrap().push(r.messages.clone());
        self.inner.call(t, r, d).await
    }
}

#[tokio::test]
async fn a_refused_regenerate_keeps_the_last_answer() {
    let sent = Arc::new(std::sync::Mutex::new(Vec::new()));
    let record = sent.clone();
    let s = setup_with(sim::SimConfig::default(), move |inner| {
        Arc::new(RecordMessages {
            inner,
            sent: record,
        })
    })
    .await;
    let (job, _) = run(
        &s.h,
        request("u1", "hi [[answer:first]]", &[FREE_A]),
        WhenResting::Refuse,
    )
    .await;
    let before = s.h.store.transcript(&job.conversation_id).await.unwrap();
    assert_eq!(before.len(), 2);
    s.h.rests
        .write(
            &RestScope::Pool(OPENROUTER_FREE_POOL.into()),
            RestLength::For(40_000),
            "test",
        )
        .await
        .unwrap();
    let mut regen = request("u1", "ignored", &[FREE_A]);
    regen.input = None;
    regen.regenerate = true;
    regen.conversation_id = Some(job.conversation_id.clone());
    let (_, outcome) = run(&s.h, regen.clone(), WhenResting::Refuse).await;
    assert!(
        matches!(
            outcome,
            Outcome::Refused {
                code: Code::AccountResting,
                ..
            }
        ),
        "{outcome:?}"
    );
    assert_eq!(
        s.h.store.transcript(&job.conversation_id).await.unwrap(),
        before,
        "pre-flight comes before the delete"
    );

    s.h.rests.clear("pool", OPENROUTER_FREE_POOL).await.unwrap();
    let (_, outcome) = run(&s.h, regen, WhenResting::Refuse).await;
    assert_eq!(outcome, finished(RunStatus::Succeeded, None));
    let after = s.h.store.transcript(&job.conversation_id).await.unwrap();
    assert_eq!(after.len(), 2, "the last answer was replaced, not added to");
    let sent = sent.lock().unwrap();
    assert_eq!(
        sent.last(),
        Some(&before[..1].to_vec()),
        "the model is sent the conversation without the answer it replaces"
    );
}

#[tokio::test]
async fn a_mid_stream_rate_limit_interrupts_and_rests_nothing() {
    let s = setup().await;
    s.sim.inject(fault(serde_json::json!({"kind": "midstream_error", "model": FREE_A, "code": 429, "after_chunks": 2})));
    let (job, outcome) = run(
        &s.h,
        request("u1", "hello there friend", &[FREE_A, PAID]),
        WhenResting::Snooze,
    )
    .await;
    assert_eq!(
        outcome,
        finished(RunStatus::Failed, Some(Code::Interrupted))
    );
    assert_eq!(called(&s.sim), vec![FREE_A], "nothing moves");
    assert!(s.h.rests.list().await.unwrap().is_empty(), "nothing rests");
    assert_eq!(s.h.rests.evidence(OPENROUTER_FREE_POOL), 0, "no evidence");
    let rec = s.h.store.run(&job.run_id).await.unwrap().unwrap();
    assert!(
        rec.incomplete && !rec.output.is_empty(),
        "partial output kept, marked incomplete"
    );
    let transcript = s.h.store.transcript(&job.conversation_id).await.unwrap();
    let last = transcript.last().expect("a transcript");
    assert_eq!(
        last.role,
        freeway::chat::Role::Assistant,
        "the partial turn stays in the transcript"
    );
    assert_eq!(last.content.as_deref(), Some(rec.output.as_str()));
}

#[tokio::test]
async fn a_mid_stream_error_before_any_output_fails_over_like_a_5xx() {
    let s = setup().await;
    s.sim.inject(fault(serde_json::json!({"kind": "midstream_error", "model": FREE_A, "code": 502, "after_chunks": 0})));
    let (_, outcome) = run(
        &s.h,
        request("u1", "hi", &[FREE_A, PAID]),
        WhenResting::Snooze,
    )
    .await;
    assert_eq!(outcome, finished(RunStatus::Succeeded, None));
    assert_eq!(called(&s.sim), vec![FREE_A, PAID]);
}

/// docs/design.md §2.3 (v3): a throttle before any output, as an `event: error` frame or as
/// DashScope's bare `code` object, is read as the 429 it carries: the route rests, the message
/// reaches the attempt log, and the run fails over. Not a stream that "ended".
#[tokio::test]
async fn a_throttle_in_an_error_event_or_a_bare_code_object_rests_the_route() {
    for (layout, message) in [
        ("event_error", "Rate limit exceeded"),
        ("top_level_code", "Free allocated quota exceeded."),
    ] {
        let s = setup().await;
        s.sim.inject(fault(serde_json::json!({"kind": "midstream_error", "layout": layout, "model": PAID, "code": 429, "after_chunks": 0})));
        let (job, outcome) = run(
            &s.h,
            request("u1", "hi", &[PAID, FREE_A]),
            WhenResting::Snooze,
        )
        .await;
        assert_eq!(outcome, finished(RunStatus::Succeeded, None), "{layout}");
        assert_eq!(called(&s.sim), vec![PAID, FREE_A], "{layout}");
        let ttl = pttl(&s.h, route_scope(PAID)).await;
        assert!(ttl > 55_000 && ttl <= 60_000, "{layout}: PAID rests: {ttl}");
        let attempts = s.h.store.attempts(&job.run_id).await.unwrap();
        assert_eq!(
            (attempts[0].http_status, attempts[0].verdict),
            (Some(200), Some(Verdict::Route)),
            "{layout}"
        );
        let error = attempts[0].error.as_deref().unwrap_or_default();
        assert!(error.contains(message), "{layout}: {error}");
    }
}

#[tokio::test]
async fn a_pool_that_starts_resting_during_a_run_snoozes_it_at_its_later_step() {
    // Another replica rests the pool right after a run's first step.
    struct RestThePoolAfterFirstCall {
        inner: Arc<dyn ChatProvider>,
        rests: Arc<MemoryRests>,
    }
    #[async_trait]
    impl ChatProvider for RestThePoolAfterFirstCall {
        async fn call(
            &self,
            t: &Target,
            r: &ChatRequest,
            d: &Deltas,
        ) -> Result<Completion, CallError> {
            let result = self.inner.call(t, r, d).await;
            if r.messages.len() == 1 {
                let scope = RestScope::Pool(OPENROUTER_FREE_POOL.into());
                self.rests
                    .write(&scope, RestLength::For(30_000), "another replica")
                    .await
                    .unwrap();
            }
            result
        }
    }
    let (sim, clock, rests) = sim_with_clock_and_rests().await;
    let provider = Arc::new(RestThePoolAfterFirstCall {
        inner: Arc::new(HttpProvider::new(fast_timeouts()).unwrap()),
        rests: rests.clone(),
    });
    let h = support::harness_with(provider, &sim.base_url(), clock, rests);
    let (job, outcome) = run(
        &h,
        request("u1", "look it up [[tools:1]]", &[FREE_A, PAID]),
        WhenResting::Snooze,
    )
    .await;
    assert!(matches!(outcome, Outcome::Snoozed { .. }), "{outcome:?}");
    assert_eq!(
        sim.calls().len(),
        1,
        "step 2 never calls into the resting pool"
    );
    let rec = h.store.run(&job.run_id).await.unwrap().unwrap();
    assert_eq!(rec.state.route_index, Some(0), "the run stays on its route");

    h.rests.clear("pool", OPENROUTER_FREE_POOL).await.unwrap();
    let outcome = execute(&h, &job, WhenResting::Snooze).await;
    assert_eq!(outcome, finished(RunStatus::Succeeded, None));
    assert_eq!(
        called(&sim),
        vec![FREE_A, FREE_A],
        "resumed at step 2 on the same route"
    );

    let mut short = request("u1", "look it up [[tools:1]]", &[FREE_A, PAID]);
    short.deadline_s = Some(3);
    let (_, outcome) = run(&h, short, WhenResting::Snooze).await;
    assert_eq!(
        outcome,
        finished(RunStatus::Failed, Some(Code::DeadlineExceeded)),
        "past its deadline"
    );
}

#[tokio::test]
async fn a_failure_after_step_one_ends_the_run_keeping_its_output() {
    let s = setup().await;
    s.sim.inject(fault(
        serde_json::json!({"kind": "bad_gateway_502", "model": PAID, "skip": 1}),
    ));
    let (job, outcome) = run(
        &s.h,
        request("u1", "go [[tools:2]]", &[PAID, FREE_A]),
        WhenResting::Snooze,
    )
    .await;
    assert_eq!(
        outcome,
        finished(RunStatus::Failed, Some(Code::UpstreamError))
    );
    assert_eq!(
        called(&s.sim),
        vec![PAID, PAID],
        "no failover, no retry after step 1"
    );
    let transcript = s.h.store.transcript(&job.conversation_id).await.unwrap();
    assert_eq!(
        transcript.len(),
        3,
        "user, assistant tool call, tool result stay"
    );

    s.sim.inject(fault(
        serde_json::json!({"kind": "upstream_429", "model": PAID, "skip": 1}),
    ));
    let (_, outcome) = run(
        &s.h,
        request("u1", "go [[tools:2]]", &[PAID]),
        WhenResting::Snooze,
    )
    .await;
    assert_eq!(
        outcome,
        finished(RunStatus::Failed, Some(Code::RateLimited))
    );
    assert!(
        pttl(&s.h, route_scope(PAID)).await > 0,
        "its rest is written"
    );
}

#[tokio::test]
async fn a_model_that_keeps_asking_for_tools_exhausts_the_budget() {
    let s = setup().await;
    let (job, outcome) = run(
        &s.h,
        request("u1", "loop [[tools:99]]", &[PAID]),
        WhenResting::Snooze,
    )
    .await;
    assert_eq!(
        outcome,
        finished(RunStatus::Failed, Some(Code::BudgetExhausted))
    );
    assert_eq!(s.sim.calls().len(), 5, "MAX_STEPS for chat");
    let rec = s.h.store.run(&job.run_id).await.unwrap().unwrap();
    assert_eq!(rec.state.counters.calls, 5);
}

#[tokio::test]
async fn an_approval_pauses_the_run_and_its_continuation_tries_once_while_the_pool_rests() {
    let s = setup().await;
    let mut req = request(
        "u1",
        "delete it [[tools:1]] [[tool:delete]]",
        &[FREE_A, PAID],
    );
    req.tools = vec![tool("delete", Approval::Required)];
    let (job, outcome) = run(&s.h, req.clone(), WhenResting::Snooze).await;
    let Outcome::AwaitingApproval(call) = outcome else {
        panic!("paused, got {outcome:?}")
    };
    assert_eq!(call.name, "delete");
    let rec = s.h.store.run(&job.run_id).await.unwrap().unwrap();
    assert_eq!(rec.status, RunStatus::AwaitingApproval);
    assert_eq!(rec.pending_tool_call.as_ref(), Some(&call));
    assert!(
        s.h.events
            .of(&job.run_id)
            .iter()
            .any(|e| matches!(e, Event::AwaitingApproval { .. }))
    );

    s.h.rests
        .write(
            &RestScope::Pool(OPENROUTER_FREE_POOL.into()),
            RestLength::For(60_000),
            "test",
        )
        .await
        .unwrap();
    let mut cont_req = req;
    cont_req.input = None;
    cont_req.conversation_id = Some(job.conversation_id.clone());
    cont_req.regenerate = false;
    let mut cont = RunJob::new(
        RunRequest {
            input: Some("(continuation)".into()),
            ..cont_req
        },
        freeway::clock::epoch_ms(),
    );
    cont.conversation_id = job.conversation_id.clone();
    cont.continuation = Some(Continuation {
        parent_run_id: job.run_id.clone(),
        tool_call: call.clone(),
        result: "deleted".into(),
    });
    let outcome = execute(&s.h, &cont, WhenResting::Snooze).await;
    assert_eq!(
        outcome,
        finished(RunStatus::Succeeded, None),
        "never delayed or refused for a rest"
    );
    assert_eq!(
        called(&s.sim),
        vec![FREE_A, FREE_A],
        "one attempt, on the first route, rests ignored"
    );
    let transcript = s.h.store.transcript(&job.conversation_id).await.unwrap();
    assert_eq!(
        transcript[2].tool_call_id.as_deref(),
        Some(call.id.as_str())
    );
    assert_eq!(transcript[2].content.as_deref(), Some("deleted"));
}

#[tokio::test]
async fn a_failed_continuation_does_not_fail_over() {
    let s = setup().await;
    s.sim.inject(fault(
        serde_json::json!({"kind": "bad_gateway_502", "model": FREE_A}),
    ));
    let mut cont = RunJob::new(
        request("u1", "x", &[FREE_A, PAID]),
        freeway::clock::epoch_ms(),
    );
    cont.continuation = Some(Continuation {
        parent_run_id: "run_parent".into(),
        tool_call: ToolCall {
            id: "call_1".into(),
            name: "lookup".into(),
            arguments: "{}".into(),
            extra_content: None,
        },
        result: "denied by the user".into(),
    });
    // The parent a continuation answers: the same user's run, on the same conversation.
    s.h.store
        .create_run(&freeway::run::RunRecord {
            run_id: "run_parent".into(),
            ..freeway::run::RunRecord::queued(&cont, freeway::clock::epoch_ms())
        })
        .await
        .unwrap();
    let outcome = execute(&s.h, &cont, WhenResting::Snooze).await;
    assert_eq!(
        outcome,
        finished(RunStatus::Failed, Some(Code::UpstreamError))
    );
    assert_eq!(called(&s.sim), vec![FREE_A]);
}

#[tokio::test]
async fn an_auth_failure_opens_the_platform_circuit_for_every_platform_route() {
    let s = setup().await;
    s.sim.inject(fault(
        serde_json::json!({"kind": "unauthorized_401", "model": FREE_A}),
    ));
    let (_, outcome) = run(
        &s.h,
        request("u1", "hi", &[FREE_A, PAID]),
        WhenResting::Refuse,
    )
    .await;
    assert_eq!(outcome, finished(RunStatus::Failed, Some(Code::AuthFailed)));
    assert_eq!(
        called(&s.sim),
        vec![FREE_A],
        "the paid route shares the platform key: closed too"
    );
    let rests = s.h.rests.list().await.unwrap();
    assert!(
        rests.iter().any(|r| r.scope == "connection"
            && r.key == "platform:openrouter"
            && r.remaining_ms > 3_500_000),
        "{rests:?}"
    );
    let closures =
        s.h.rests
            .closures(&[Route::parse(PAID, &Catalog::builtin()).unwrap()])
            .await
            .unwrap();
    assert_eq!(
        closures[0].as_ref().map(|c| c.kind),
        Some(RestKind::Circuit)
    );
}

#[tokio::test]
async fn a_client_error_moves_on_and_ends_upstream_rejected_when_nothing_is_left() {
    let s = setup().await;
    s.sim.inject(fault(
        serde_json::json!({"kind": "bad_request_400", "count": 3}),
    ));
    let (_, outcome) = run(
        &s.h,
        request("u1", "hi", &[FREE_A, PAID]),
        WhenResting::Snooze,
    )
    .await;
    assert_eq!(
        outcome,
        finished(RunStatus::Failed, Some(Code::UpstreamRejected))
    );
    assert_eq!(called(&s.sim), vec![FREE_A, PAID]);
    assert!(
        s.h.rests.list().await.unwrap().is_empty(),
        "a client error rests nothing"
    );
}

#[tokio::test]
async fn a_run_tells_its_story_in_events_from_started_to_finished() {
    let s = setup().await;
    let (job, outcome) = run(
        &s.h,
        request("u1", "hi [[tools:1]] [[answer:all done]]", &[PAID]),
        WhenResting::Snooze,
    )
    .await;
    assert_eq!(outcome, finished(RunStatus::Succeeded, None));
    let events = s.h.events.of(&job.run_id);
    let kinds: Vec<&str> = events.iter().map(Event::kind).collect();
    assert_eq!(kinds.first(), Some(&"started"));
    assert_eq!(kinds.last(), Some(&"finished"));
    for k in ["attempt", "tool_call", "tool_result", "delta"] {
        assert!(kinds.contains(&k), "{k} in {kinds:?}");
    }
    let text: String = events
        .iter()
        .filter_map(|e| match e {
            Event::Delta { text } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    assert!(text.contains("all done"), "{text}");
}

/// `keys`, readable for `up_for` more lookups, then not (a store outage).
struct KeysOutage {
    up_for: std::sync::atomic::AtomicU32,
    keys: Arc<dyn freeway::provider::Targets>,
}

#[async_trait]
impl freeway::provider::Targets for KeysOutage {
    async fn target(
        &self,
        route: &Route,
        user_id: &str,
    ) -> Result<Target, freeway::provider::TargetError> {
        let one_less = |n: u32| n.checked_sub(1);
        let up = self.up_for.fetch_update(
            std::sync::atomic::Ordering::SeqCst,
            std::sync::atomic::Ordering::SeqCst,
            one_less,
        );
        if up.is_err() {
            return Err(freeway::provider::TargetError::Unavailable(
                "the store is down".into(),
            ));
        }
        self.keys.target(route, user_id).await
    }
}

#[tokio::test]
async fn keys_that_cannot_be_read_spend_none_of_the_budget() {
    let mut s = setup().await;
    let outage = Arc::new(KeysOutage {
        up_for: 0.into(),
        keys: s.h.targets.clone(),
    });
    s.h.engine = s.h.engine_with(outage.clone());
    let mut req = request("u1", "hello", &[PAID]);
    req.kind = Kind::Complete;
    let job = RunJob::new(req, freeway::clock::epoch_ms());
    let routes = job.check(&Catalog::builtin()).unwrap();

    let err = s.h.engine.execute(&job, &routes, WhenResting::Snooze).await;
    assert!(err.is_err(), "an infrastructure fault ends the delivery");
    let rec = s.h.store.run(&job.run_id).await.unwrap();
    assert_eq!(rec.map_or(0, |r| r.state.counters.calls), 0);
    assert!(s.h.store.attempts(&job.run_id).await.unwrap().is_empty());

    outage
        .up_for
        .store(u32::MAX, std::sync::atomic::Ordering::SeqCst);
    let outcome = execute(&s.h, &job, WhenResting::Snooze).await;
    assert_eq!(outcome, finished(RunStatus::Succeeded, None));
    assert_eq!(
        called(&s.sim),
        vec![PAID],
        "the redelivery made its one call"
    );
}

#[tokio::test]
async fn a_summary_is_one_more_call_whose_failure_does_not_fail_the_run() {
    let mut s = setup().await;
    s.h.engine = s.h.engine.clone().with_summary(true);
    let (ok, outcome) = run(&s.h, request("u1", "hi", &[PAID]), WhenResting::Snooze).await;
    assert_eq!(outcome, finished(RunStatus::Succeeded, None));
    let rec = s.h.store.run(&ok.run_id).await.unwrap().unwrap();
    assert_eq!(rec.state.counters.calls, 2, "the answer, then the summary");
    assert!(rec.summary.is_some_and(|t| !t.is_empty()));
    assert_eq!(
        s.h.store
            .transcript(&ok.conversation_id)
            .await
            .unwrap()
            .len(),
        2,
        "the summary's prompt and answer stay out of the transcript"
    );

    s.sim.inject(fault(
        serde_json::json!({"kind": "bad_gateway_502", "model": PAID, "skip": 1}),
    ));
    let (failed_summary, outcome) =
        run(&s.h, request("u1", "hi", &[PAID]), WhenResting::Snooze).await;
    assert_eq!(outcome, finished(RunStatus::Succeeded, None));
    let rec =
        s.h.store
            .run(&failed_summary.run_id)
            .await
            .unwrap()
            .unwrap();
    assert_eq!((rec.state.counters.calls, rec.summary), (2, None));

    let mut complete = request("u1", "hi", &[PAID]);
    complete.kind = Kind::Complete;
    let (_, outcome) = run(&s.h, complete, WhenResting::Snooze).await;
    assert_eq!(outcome, finished(RunStatus::Succeeded, None));
    assert_eq!(s.sim.calls().len(), 5, "complete makes no summary call");
}

/// The call that comes after a tool result crashes its executor (a `kill -9` in the middle of the
/// call), once; every other call goes through.
struct CrashAfterTheTool {
    inner: Arc<dyn ChatProvider>,
    crashed: std::sync::atomic::AtomicBool,
}

#[async_trait]
impl ChatProvider for CrashAfterTheTool {
    async fn call(&self, t: &Target, r: &ChatRequest, d: &Deltas) -> Result<Completion, CallError> {
        let after_tool = r.messages.last().is_some_and(|m| m.tool_call_id.is_some());
        if after_tool && !self.crashed.swap(true, std::sync::atomic::Ordering::SeqCst) {
            panic!("the executor dies in the middle of the call");
        }
        self.inner.call(t, r, d).await
    }
}

#[tokio::test]
async fn a_run_that_crashes_inside_its_tool_loop_resumes_within_its_budget() {
    let s = setup_with(sim::SimConfig::default(), |inner| {
        Arc::new(CrashAfterTheTool {
            inner,
            crashed: false.into(),
        })
    })
    .await;
    let job = RunJob::new(
        request("u1", "hi [[tools:1]] [[answer:all done]]", &[PAID]),
        freeway::clock::epoch_ms(),
    );
    let routes = job.check(&Catalog::builtin()).unwrap();
    let engine = s.h.engine.clone();
    let (first, crashed_job, crashed_routes) = (engine, job.clone(), routes.clone());
    let died = tokio::spawn(async move {
        first
            .execute(&crashed_job, &crashed_routes, WhenResting::Snooze)
            .await
    })
    .await;
    assert!(died.is_err_and(|e| e.is_panic()), "the first executor died");
    let stored = s.h.store.run(&job.run_id).await.unwrap().unwrap();
    assert_eq!(
        stored.state.counters.calls, 2,
        "the crashed call was counted before it was made"
    );

    // The dead executor's lease expires; the queue delivers the run again.
    s.h.clock.advance(freeway::lease::LEASE_TTL);
    let outcome = execute(&s.h, &job, WhenResting::Snooze).await;
    assert_eq!(outcome, finished(RunStatus::Succeeded, None));

    let rec = s.h.store.run(&job.run_id).await.unwrap().unwrap();
    let made = s.sim.calls().len() as u32 + 1;
    assert_eq!(
        rec.state.counters.calls, made,
        "every call made was counted, the crashed one too"
    );
    let budget = freeway::budget::Budget::new(Kind::Chat, 1, false);
    assert!(made <= budget.max_calls());
    let attempts: Vec<(u32, u32, bool)> =
        s.h.store
            .attempts(&job.run_id)
            .await
            .unwrap()
            .iter()
            .map(|a| (a.n, a.step, a.is_lost()))
            .collect();
    assert_eq!(
        attempts,
        vec![(1, 1, false), (2, 2, true), (3, 2, false)],
        "attempt 2 died with its executor: its row says lost, and its number is not reused"
    );
    let roles: Vec<String> =
        s.h.store
            .transcript(&job.conversation_id)
            .await
            .unwrap()
            .iter()
            .map(|m| format!("{:?}", m.role))
            .collect();
    assert_eq!(
        roles,
        ["User", "Assistant", "Tool", "Assistant"],
        "the tool result and the answer are stored once"
    );
    let tool_results =
        s.h.events
            .of(&job.run_id)
            .into_iter()
            .filter(|e| matches!(e, Event::ToolResult { .. }))
            .count();
    assert_eq!(tool_results, 1, "the tool ran once");
}

#[tokio::test]
async fn keys_that_cannot_be_read_for_the_summary_keep_the_answer() {
    let mut s = setup().await;
    let outage = Arc::new(KeysOutage {
        up_for: 1.into(),
        keys: s.h.targets.clone(),
    });
    s.h.engine = s.h.engine_with(outage).with_summary(true);
    let job = RunJob::new(
        request("u1", "hi [[answer:kept]]", &[PAID]),
        freeway::clock::epoch_ms(),
    );
    let routes = job.check(&Catalog::builtin()).unwrap();
    let err = s.h.engine.execute(&job, &routes, WhenResting::Snooze).await;
    assert!(err.is_err(), "the summary's keys could not be read");
    let rec = s.h.store.run(&job.run_id).await.unwrap().unwrap();
    assert_eq!(
        (
            rec.state.counters.calls,
            rec.state.counters.steps,
            rec.output.as_str()
        ),
        (1, 1, "kept"),
        "the answer's step is stored; the summary was never counted"
    );
    assert_eq!(s.h.store.attempts(&job.run_id).await.unwrap().len(), 1);
    let transcript = s.h.store.transcript(&job.conversation_id).await.unwrap();
    assert_eq!(
        transcript.last().and_then(|m| m.content.as_deref()),
        Some("kept")
    );
}

/// Whether the fleet holds any rest, circuit or evidence.
async fn rested_anything(h: &Harness) -> bool {
    !h.rests.list().await.unwrap().is_empty() || h.rests.evidence(OPENROUTER_FREE_POOL) > 0
}

#[tokio::test]
async fn a_route_without_a_key_is_skipped_unclassified_and_rests_nothing() {
    let s = setup().await;
    // The harness's targets know no user connections: `conn_gone` has no key for this run.
    let gone = "vendor/model@conn_gone";
    let (job, outcome) = run(
        &s.h,
        request("u1", "hi", &[gone, PAID]),
        WhenResting::Snooze,
    )
    .await;
    assert_eq!(outcome, finished(RunStatus::Succeeded, None));
    assert_eq!(called(&s.sim), vec![PAID], "no call for the keyless route");
    let rec = s.h.store.run(&job.run_id).await.unwrap().unwrap();
    assert_eq!(
        rec.state.counters.calls, 1,
        "the skipped route spent no budget"
    );
    assert_eq!(s.h.store.attempts(&job.run_id).await.unwrap().len(), 1);
    assert!(!rested_anything(&s.h).await);

    // Alone in its chain, it ends the run `connection_missing`, still without a call or a rest.
    let (job, outcome) = run(&s.h, request("u1", "hi", &[gone]), WhenResting::Snooze).await;
    assert_eq!(
        outcome,
        finished(RunStatus::Failed, Some(Code::ConnectionMissing))
    );
    assert_eq!(called(&s.sim), vec![PAID]);
    assert!(s.h.store.attempts(&job.run_id).await.unwrap().is_empty());
    assert!(!rested_anything(&s.h).await);
}

#[tokio::test]
async fn a_missing_platform_key_circuits_nothing() {
    let mut s = setup().await;
    s.h.engine =
        s.h.engine_with(Arc::new(freeway::provider::EnvTargets::openrouter(
            &s.sim.base_url(),
            None,
        )));
    let (_, outcome) = run(
        &s.h,
        request("u1", "hi", &[FREE_A, PAID]),
        WhenResting::Snooze,
    )
    .await;
    assert_eq!(
        outcome,
        finished(RunStatus::Failed, Some(Code::ConnectionMissing))
    );
    assert!(called(&s.sim).is_empty());
    assert!(
        s.h.rests.list().await.unwrap().is_empty(),
        "no circuit on the platform"
    );
    assert!(!rested_anything(&s.h).await);
}

/// The harness's events, except that every `delta` fails to publish (Redis gone mid-call).
struct DeltasFail(Arc<dyn freeway::events::EventSink>);

#[async_trait]
impl freeway::events::EventSink for DeltasFail {
    async fn publish(
        &self,
        run_id: &str,
        event: &Event,
    ) -> Result<(), freeway::events::EventError> {
        if matches!(event, Event::Delta { .. }) {
            return Err(freeway::events::EventError::new("redis is down"));
        }
        self.0.publish(run_id, event).await
    }
}

#[tokio::test]
async fn an_answer_paid_for_is_kept_when_its_deltas_cannot_be_published() {
    let mut s = setup().await;
    let fleet = freeway::fleet::Fleet {
        events: Arc::new(DeltasFail(s.h.events.clone())),
        ..s.h.fleet()
    };
    s.h.engine = s.h.engine_on(s.h.targets.clone(), fleet);
    let (job, outcome) = run(
        &s.h,
        request("u1", "hi [[answer:paid for]]", &[PAID]),
        WhenResting::Snooze,
    )
    .await;
    assert_eq!(outcome, finished(RunStatus::Succeeded, None));
    assert_eq!(called(&s.sim), vec![PAID], "one call, not abandoned");
    let rec = s.h.store.run(&job.run_id).await.unwrap().unwrap();
    assert_eq!(rec.output, "paid for");
}

#[tokio::test]
async fn a_continuation_of_no_run_of_its_user_is_invalid_and_calls_nothing() {
    let s = setup().await;
    let continuation = |parent: &str| {
        let mut cont = RunJob::new(request("u1", "x", &[PAID]), freeway::clock::epoch_ms());
        cont.continuation = Some(Continuation {
            parent_run_id: parent.into(),
            tool_call: ToolCall {
                id: "call_1".into(),
                name: "lookup".into(),
                arguments: "{}".into(),
                extra_content: None,
            },
            result: "approved".into(),
        });
        cont
    };
    let orphan = continuation("run_nobody");
    let outcome = execute(&s.h, &orphan, WhenResting::Snooze).await;
    assert!(matches!(outcome, Outcome::Invalid(_)), "{outcome:?}");

    // Another user's run on another conversation is no parent of u1's continuation either.
    let theirs = RunJob::new(request("u2", "hi", &[PAID]), freeway::clock::epoch_ms());
    s.h.store
        .create_run(&freeway::run::RunRecord::queued(
            &theirs,
            freeway::clock::epoch_ms(),
        ))
        .await
        .unwrap();
    let outcome = execute(&s.h, &continuation(&theirs.run_id), WhenResting::Snooze).await;
    assert!(matches!(outcome, Outcome::Invalid(_)), "{outcome:?}");
    assert!(called(&s.sim).is_empty(), "no call for either");
    assert!(
        s.h.store.run(&orphan.run_id).await.unwrap().is_none(),
        "nothing recorded"
    );
}

/// OpenRouter answers 200 before the upstream does (its keep-alive comments), so an upstream
/// refusal often arrives inside the stream, before any text: it is read as the 429 it carries,
/// fails over with its rest, and nothing is interrupted (docs/design.md §2.3).
#[tokio::test]
async fn an_in_band_429_before_any_output_fails_over_and_rests_like_an_http_429() {
    let s = setup().await;
    s.sim.inject(fault(serde_json::json!({"kind": "midstream_error", "model": FREE_A, "code": 429, "after_chunks": 0})));
    let (job, outcome) = run(
        &s.h,
        request("u1", "hello", &[FREE_A, FREE_B, PAID]),
        WhenResting::Snooze,
    )
    .await;
    assert_eq!(outcome, finished(RunStatus::Succeeded, None));
    assert_eq!(
        called(&s.sim),
        vec![FREE_A, PAID],
        "the pool's other route is skipped"
    );
    assert!(pttl(&s.h, pool_scope()).await > 0, "the pool rests");
    let attempts = s.h.store.attempts(&job.run_id).await.unwrap();
    assert_eq!(attempts[0].verdict, Some(Verdict::Account));
    assert_eq!(attempts[0].http_status, Some(200));
}

/// A user naming made-up models rests each one (the provider has no endpoints for it), but those
/// rests count against that user: the engine writes them bounded, so they keep
/// `UNNAMED_RESTS_PER_USER`, and another user's rest stays.
#[tokio::test]
async fn a_users_made_up_models_rest_within_that_users_bound() {
    use freeway::rest::{Rests, UNNAMED_RESTS_PER_USER};
    let s = setup().await;
    let mut gone = fault(serde_json::json!({"kind": "no_endpoints_404", "model": FREE_A}));
    gone.count = u32::MAX;
    s.sim.inject(gone);
    let (_, outcome) = run(
        &s.h,
        request("u1", "hi", &[FREE_A, PAID]),
        WhenResting::Snooze,
    )
    .await;
    assert_eq!(outcome, finished(RunStatus::Succeeded, None));
    let made_up = UNNAMED_RESTS_PER_USER + 5;
    for i in 0..made_up {
        let mut no_endpoints = fault(serde_json::json!({"kind": "no_endpoints_404"}));
        no_endpoints.model = Some(format!("vendor/made-up-{i}"));
        s.sim.inject(no_endpoints);
        let model = format!("vendor/made-up-{i}");
        let (job, _) = run(&s.h, request("hog", "hi", &[&model]), WhenResting::Snooze).await;
        let attempts = s.h.store.attempts(&job.run_id).await.unwrap();
        assert_eq!(attempts[0].verdict, Some(Verdict::Gone));
    }
    let listed = s.h.rests.list().await.unwrap();
    let resting = listed.iter().filter(|r| r.key.contains("made-up")).count();
    assert_eq!(resting, UNNAMED_RESTS_PER_USER, "{listed:?}");
    assert_eq!(s.h.rests.dropped().await.unwrap(), 5);
    assert!(
        pttl(&s.h, route_scope(FREE_A)).await > 0,
        "u1's rest is kept"
    );
}

/// A route no provider serves any more answers 404 "No endpoints found for …": it rests an
/// hour, so the next run skips it without spending an attempt (docs/design.md §3.3).
#[tokio::test]
async fn a_dead_route_is_skipped_by_the_next_run_without_a_call() {
    let s = setup().await;
    s.sim.inject(fault(
        serde_json::json!({"kind": "no_endpoints_404", "model": FREE_A}),
    ));
    let (job, outcome) = run(
        &s.h,
        request("u1", "hi", &[FREE_A, PAID]),
        WhenResting::Snooze,
    )
    .await;
    assert_eq!(outcome, finished(RunStatus::Succeeded, None));
    let attempts = s.h.store.attempts(&job.run_id).await.unwrap();
    assert_eq!(attempts[0].verdict, Some(Verdict::Gone));
    let rest = pttl(&s.h, route_scope(FREE_A)).await;
    assert!(rest > 3_500_000 && rest <= 3_600_000, "an hour: {rest}");
    let (_, outcome) = run(
        &s.h,
        request("u2", "hi", &[FREE_A, PAID]),
        WhenResting::Snooze,
    )
    .await;
    assert_eq!(outcome, finished(RunStatus::Succeeded, None));
    assert_eq!(
        called(&s.sim),
        vec![FREE_A, PAID, PAID],
        "the second run never calls the dead route"
    );
}

/// A moderation error inside a 200, before any text, is the request's fault (`client`): no
/// rest, and no one-route retry as a 5xx would get (docs/design.md §2.3).
#[tokio::test]
async fn a_moderation_error_inside_a_200_is_a_client_error_and_is_not_retried() {
    let s = setup().await;
    s.sim.inject(fault(serde_json::json!({"kind": "midstream_error", "model": FREE_A, "code": 403, "after_chunks": 0})));
    let (job, outcome) = run(&s.h, request("u1", "hi", &[FREE_A]), WhenResting::Snooze).await;
    assert_eq!(
        outcome,
        finished(RunStatus::Failed, Some(Code::UpstreamRejected))
    );
    assert_eq!(called(&s.sim), vec![FREE_A], "no retry");
    let attempts = s.h.store.attempts(&job.run_id).await.unwrap();
    assert_eq!(attempts[0].verdict, Some(Verdict::Client));
    assert!(!rested_anything(&s.h).await);
}

/// `billing_wait` is a spend window, not a dead key: a chain it closes waits for the window like
/// a rate limit (the run is delayed), where `billing` would fail it.
#[tokio::test]
async fn a_chain_closed_only_by_a_billing_wait_snoozes_until_the_spend_window_ends() {
    let s = setup().await;
    s.sim.inject(fault(
        serde_json::json!({"kind": "in_flight_402", "model": PAID, "retry_after_s": 20}),
    ));
    let (job, outcome) = run(&s.h, request("u1", "hi", &[PAID]), WhenResting::Snooze).await;
    let Outcome::Snoozed { until_ms, .. } = outcome else {
        panic!("snoozed, got {outcome:?}")
    };
    let now = freeway::clock::epoch_ms();
    assert!(
        until_ms >= now + 18_000 && until_ms <= now + 22_000,
        "until the hint's end, plus at most 2 s: {} ms",
        until_ms - now
    );
    let circuit = RestScope::Connection("platform:openrouter".into());
    let rest = pttl(&s.h, circuit).await;
    assert!(
        rest > 18_000 && rest <= 20_000,
        "a connection rest of the hint: {rest}"
    );
    assert_eq!(s.sim.calls().len(), 1);
    let rec = s.h.store.run(&job.run_id).await.unwrap().unwrap();
    assert_eq!(rec.status, RunStatus::Delayed);
}

#[tokio::test]
async fn a_cancelled_run_ends_cancelled_before_its_next_call() {
    let s = setup().await;
    let job = RunJob::new(
        request("u1", "hi", &[FREE_A, PAID]),
        freeway::clock::epoch_ms(),
    );
    // The producer marked it while a worker held it: the mark is what the executor reads.
    freeway::lease::Leases::cancel(&*s.h.leases, &job.run_id, "admin token")
        .await
        .unwrap();
    let outcome = execute(&s.h, &job, WhenResting::Snooze).await;
    assert_eq!(outcome, finished(RunStatus::Cancelled, None));
    assert!(s.sim.calls().is_empty(), "no call after the cancel");
    let rec = s.h.store.run(&job.run_id).await.unwrap().unwrap();
    assert_eq!(rec.status, RunStatus::Cancelled);
    let by = Some("admin token".to_string());
    assert_eq!(
        s.h.events.of(&job.run_id).last(),
        Some(&Event::Cancelled { by }),
        "the stream says who"
    );
}

/// docs/design.md §2.1: the deadline bounds the calls. A provider that trickles its answer
/// (a chunk, then nothing for 30 s, under call timeouts of a minute) is cut at the run's
/// deadline; its attempt says `deadline_exceeded`, nothing rests for it, and no call starts
/// after the deadline. (A 5 s run over three such routes lasted 77 s and made three calls.)
#[tokio::test]
async fn a_call_is_cut_at_the_deadline_and_none_starts_after_it() {
    let patient = |_| -> Arc<dyn ChatProvider> {
        Arc::new(
            HttpProvider::new(Timeouts {
                connect: Duration::from_secs(10),
                first_byte: Duration::from_secs(60),
                idle: Duration::from_secs(60),
                total: Duration::from_secs(300),
            })
            .unwrap(),
        )
    };
    let s = setup_with(sim::SimConfig::default(), patient).await;
    for model in [FREE_A, FREE_B, PAID] {
        s.sim.inject(fault(serde_json::json!(
            {"kind": "stall", "model": model, "delay_ms": 30_000, "after_chunks": 1}
        )));
    }
    let mut req = request("u1", "hi", &[FREE_A, FREE_B, PAID]);
    req.deadline_s = Some(1);
    let (job, outcome) = run(&s.h, req, WhenResting::Snooze).await;
    assert_eq!(
        outcome,
        finished(RunStatus::Failed, Some(Code::DeadlineExceeded))
    );
    assert_eq!(called(&s.sim), vec![FREE_A], "no call after the deadline");
    let attempts = s.h.store.attempts(&job.run_id).await.unwrap();
    assert_eq!(attempts.len(), 1);
    assert_eq!(attempts[0].error.as_deref(), Some("deadline_exceeded"));
    assert_eq!(attempts[0].verdict, None, "the provider is not blamed");
    let ended = attempts[0].t_ms + attempts[0].latency_ms;
    assert!(
        ended <= job.deadline_ms + 500,
        "cut at the deadline: {} ms past it",
        ended.saturating_sub(job.deadline_ms)
    );
    assert!(s.h.rests.list().await.unwrap().is_empty(), "nothing rests");
}

#[tokio::test]
async fn an_executor_whose_lease_another_took_makes_no_further_call() {
    // The executor stalls past its lease's life during its first call (a paused process), and
    // another takes the run meanwhile: its next step's call must not be made.
    struct StallAndLoseTheLease {
        inner: Arc<dyn ChatProvider>,
        clock: Arc<freeway::clock::InstantClock>,
        leases: Arc<freeway::lease::MemoryLeases>,
        run_id: std::sync::Mutex<Option<String>>,
    }
    #[async_trait]
    impl ChatProvider for StallAndLoseTheLease {
        async fn call(
            &self,
            t: &Target,
            r: &ChatRequest,
            d: &Deltas,
        ) -> Result<Completion, CallError> {
            let result = self.inner.call(t, r, d).await;
            let run_id = self.run_id.lock().unwrap().clone();
            if let (Some(run_id), 1) = (run_id, r.messages.len()) {
                self.clock
                    .advance(freeway::lease::LEASE_TTL + Duration::from_secs(1));
                let taken = self.leases.acquire(&run_id, "another-executor").await;
                assert!(matches!(taken, Ok(freeway::lease::Lease::Granted)));
            }
            result
        }
    }
    let (sim, clock, rests) = sim_with_clock_and_rests().await;
    let leases = Arc::new(freeway::lease::MemoryLeases::new(clock.clone()));
    let provider = Arc::new(StallAndLoseTheLease {
        inner: Arc::new(HttpProvider::new(fast_timeouts()).unwrap()),
        clock: clock.clone(),
        leases: leases.clone(),
        run_id: Default::default(),
    });
    let mut h = support::harness_with(provider.clone(), &sim.base_url(), clock, rests);
    h.parts.leases = leases;
    h.engine = h.parts.engine_with(h.targets.clone());
    let job = RunJob::new(
        request("u1", "look it up [[tools:1]]", &[PAID]),
        freeway::clock::epoch_ms(),
    );
    *provider.run_id.lock().unwrap() = Some(job.run_id.clone());
    let outcome = execute(&h, &job, WhenResting::Snooze).await;
    assert!(matches!(outcome, Outcome::Busy { .. }), "{outcome:?}");
    assert_eq!(
        sim.calls().len(),
        1,
        "the second step's call is the other executor's to make"
    );
}
