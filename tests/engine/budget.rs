//! The budget of docs/design.md §2.1 and the walk rules of §2.2, proven over random scripts of
//! provider outcomes and random chains: calls never exceed the table, a closed route is never
//! called, nothing fails over after output, and a continuation makes exactly one step-1 attempt;
//! with `FREEWAY_SUMMARY` on or off. The fleet is the in-process one: no server is needed.

use crate::support;

use async_trait::async_trait;
use freeway::budget::{Budget, Kind};
use freeway::catalog::Catalog;
use freeway::chat::{ToolCall, ToolSpec};
use freeway::classify::CIRCUIT_MS;
use freeway::clock::{Clock, InstantClock};
use freeway::engine::{Outcome, WhenResting};
use freeway::events::Event;
use freeway::headers::Headers;
use freeway::job::{Continuation, RunJob, RunRequest};
use freeway::provider::{
    CallError, ChatProvider, ChatRequest, Completion, Deltas, InBandError, Target, TransportError,
};
use freeway::rest::{MemoryRests, RestKind, Rests};
use freeway::route::{Route, RouteSpec};
use freeway::store::Store;
use proptest::prelude::*;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One scripted provider outcome.
#[derive(Debug, Clone)]
enum Scripted {
    Answer,
    ToolCall,
    Server,
    Network,
    /// A 402/429 variant, by index into [`limit_response`].
    Limit(usize),
    MidStream {
        rate_limit: bool,
        text: bool,
    },
}

const LIMIT_VARIANTS: usize = 7;

/// 402/429 answers of every verdict: account, provider, ambiguous, route (high demand),
/// billing, auth, client.
fn limit_response(i: usize) -> CallError {
    let (status, headers, body): (u16, &[(&str, &str)], &str) = match i {
        0 => (
            429,
            &[
                ("X-RateLimit-Limit", "20"),
                ("X-RateLimit-Remaining", "0"),
                ("X-RateLimit-Reset", "4102444800000"),
            ],
            r#"{"error":{"message":"Rate limit exceeded: free-models-per-min. ","code":429,"metadata":{"provider_name":null,"limit_source":"openrouter_free_tier_per_minute"}}}"#,
        ),
        1 => (
            429,
            &[],
            r#"{"error":{"message":"Provider returned error","code":429,"metadata":{"raw":"rate-limited upstream","provider_name":"Chutes"}}}"#,
        ),
        2 => (
            429,
            &[],
            r#"{"error":{"code":429,"message":"Rate limit exceeded"}}"#,
        ),
        3 => (
            429,
            &[],
            r#"{"error":{"message":"Rate limit exceeded: x/uuid. High demand for x:free on OpenRouter - limited to 8 requests per minute. Please retry shortly.","code":429,"metadata":{"limit_source":"openrouter_shared_capacity","provider_name":null}}}"#,
        ),
        4 => (
            402,
            &[],
            r#"{"error":{"message":"Insufficient credits. Add more using https://openrouter.ai/settings/credits","code":402,"metadata":{"limit_source":"openrouter_credits"}}}"#,
        ),
        5 => (
            401,
            &[],
            r#"{"error":{"code":401,"message":"User not found."}}"#,
        ),
        _ => (
            400,
            &[],
            r#"{"error":{"code":400,"message":"'models' array must have 3 items or fewer."}}"#,
        ),
    };
    CallError::Http {
        status,
        headers: headers
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect::<Headers>(),
        body: body.as_bytes().to_vec().into(),
    }
}

fn scripted() -> impl Strategy<Value = Scripted> {
    prop_oneof![
        3 => Just(Scripted::Answer),
        3 => Just(Scripted::ToolCall),
        2 => Just(Scripted::Server),
        1 => Just(Scripted::Network),
        4 => (0..LIMIT_VARIANTS).prop_map(Scripted::Limit),
        1 => (any::<bool>(), any::<bool>()).prop_map(|(rate_limit, text)| Scripted::MidStream { rate_limit, text }),
    ]
}

/// A provider that plays a script and checks, at every call, that the route is open.
struct ScriptProvider {
    script: Mutex<VecDeque<Scripted>>,
    chain: Vec<Route>,
    rests: Arc<MemoryRests>,
    continuation: bool,
    calls: Mutex<u32>,
    closed_calls: Mutex<Vec<String>>,
}

#[async_trait]
impl ChatProvider for ScriptProvider {
    async fn call(
        &self,
        _t: &Target,
        req: &ChatRequest,
        deltas: &Deltas,
    ) -> Result<Completion, CallError> {
        *self.calls.lock().unwrap() += 1;
        let route = self
            .chain
            .iter()
            .find(|r| r.model == req.model)
            .expect("a route of the chain")
            .clone();
        let closure = self
            .rests
            .closures(std::slice::from_ref(&route))
            .await
            .unwrap()
            .remove(0);
        let closed = match closure {
            Some(c) => !self.continuation || c.kind == RestKind::Circuit,
            None => false,
        };
        if closed {
            self.closed_calls.lock().unwrap().push(route.key());
        }
        let next = self
            .script
            .lock()
            .unwrap()
            .pop_front()
            .unwrap_or(Scripted::Answer);
        match next {
            Scripted::Answer => {
                deltas.push("done");
                Ok(Completion {
                    text: "done".into(),
                    finish_reason: Some("stop".into()),
                    ..Default::default()
                })
            }
            Scripted::ToolCall => Ok(Completion {
                tool_calls: vec![ToolCall {
                    id: format!("call_{}", ulid::Ulid::generate()),
                    name: "lookup".into(),
                    arguments: "{}".into(),
                    extra_content: None,
                }],
                finish_reason: Some("tool_calls".into()),
                ..Default::default()
            }),
            Scripted::Server => Err(CallError::Http {
                status: 502,
                headers: Headers::new(),
                body: r#"{"error":{"code":502,"message":"Provider returned error"}}"#.into(),
            }),
            Scripted::Network => Err(CallError::Transport(TransportError::Connect(
                "connection refused".into(),
            ))),
            Scripted::Limit(i) => Err(limit_response(i)),
            Scripted::MidStream { rate_limit, text } => {
                if text {
                    deltas.push("partial");
                }
                let code = if rate_limit { 429 } else { 502 };
                let error = serde_json::json!({"code": code, "message": "mid-stream"});
                Err(CallError::InBand {
                    error: InBandError {
                        code: Some(code),
                        code_text: None,
                        message: "mid-stream".into(),
                        error,
                    },
                    partial: if text {
                        "partial".into()
                    } else {
                        String::new()
                    },
                })
            }
        }
    }
}

fn chain_strategy() -> impl Strategy<Value = Vec<bool>> {
    proptest::collection::vec(any::<bool>(), 1..=8)
}

fn kind_strategy() -> impl Strategy<Value = Kind> {
    prop_oneof![Just(Kind::Chat), Just(Kind::Research), Just(Kind::Complete)]
}

async fn check_case(
    shared: Vec<bool>,
    kind: Kind,
    script: Vec<Scripted>,
    continuation: bool,
    summary: bool,
) -> Result<(), TestCaseError> {
    let specs: Vec<RouteSpec> = shared
        .iter()
        .enumerate()
        .map(|(i, s)| RouteSpec {
            model: if *s {
                format!("vendor/m{i}:free")
            } else {
                format!("vendor/paid{i}")
            },
            connection: None,
            provider: None,
        })
        .collect();
    let chain: Vec<Route> = specs
        .iter()
        .map(|s| Route::resolve(s, &Catalog::builtin()).unwrap())
        .collect();
    // The rests keep their own time, so a test can let every rest expire without moving the
    // run's deadline.
    let rest_clock = Arc::new(InstantClock::default());
    let rests = Arc::new(MemoryRests::new(rest_clock.clone()));
    let provider = Arc::new(ScriptProvider {
        script: Mutex::new(script.into()),
        chain: chain.clone(),
        rests: rests.clone(),
        continuation,
        calls: Mutex::new(0),
        closed_calls: Mutex::new(vec![]),
    });
    let mut h = support::harness_with(
        provider.clone(),
        "http://127.0.0.1:9",
        Arc::new(InstantClock::default()),
        rests,
    );
    h.engine = h.engine.clone().with_summary(summary);
    let request = RunRequest {
        kind,
        tools: vec![ToolSpec {
            name: "lookup".into(),
            description: String::new(),
            parameters: serde_json::json!({"type":"object"}),
            approval: Default::default(),
        }],
        ..RunRequest::new("u1", "question", specs)
    };
    let mut job = RunJob::new(request, freeway::clock::epoch_ms());
    if continuation {
        job.continuation = Some(Continuation {
            parent_run_id: "run_parent".into(),
            tool_call: ToolCall {
                id: "call_approved".into(),
                name: "lookup".into(),
                arguments: "{}".into(),
                extra_content: None,
            },
            result: "approved result".into(),
        });
        // The parent a continuation answers: the same user's run, on the same conversation.
        h.store
            .create_run(&freeway::run::RunRecord {
                run_id: "run_parent".into(),
                ..freeway::run::RunRecord::queued(&job, freeway::clock::epoch_ms())
            })
            .await
            .unwrap();
    }
    let routes = job.check(&Catalog::builtin()).unwrap();
    let mut outcome = None;
    for _ in 0..12 {
        let o = h
            .engine
            .execute(&job, &routes, WhenResting::Snooze)
            .await
            .unwrap();
        if let Outcome::Snoozed { until_ms, .. } = o {
            // Time passes: every rest expires before the re-delivery, a spent day's at the day
            // clock's midnight, up to a day away.
            let wait = until_ms.saturating_sub(rest_clock.now_ms()).max(CIRCUIT_MS);
            rest_clock.advance(Duration::from_millis(wait + 1_000));
            continue;
        }
        outcome = Some(o);
        break;
    }
    prop_assert!(outcome.is_some(), "the run settled");

    let calls = *provider.calls.lock().unwrap();
    let budget = Budget::new(kind, chain.len(), summary);
    prop_assert!(
        calls <= budget.max_calls(),
        "{calls} calls > budget {}",
        budget.max_calls()
    );
    let rec = h.store.run(&job.run_id).await.unwrap().unwrap();
    prop_assert_eq!(rec.state.counters.calls, calls, "every call was counted");
    prop_assert!(
        provider.closed_calls.lock().unwrap().is_empty(),
        "called closed routes: {:?}",
        provider.closed_calls.lock().unwrap()
    );

    let events = h.events.of(&job.run_id);
    if let Some(first_output) = events.iter().position(Event::is_output) {
        let failovers_after = events[first_output..]
            .iter()
            .filter(|e| matches!(e, Event::Failover { .. }))
            .count();
        prop_assert_eq!(failovers_after, 0, "no failover after output: {:?}", events);
        let routes_before: Vec<&String> = events[..first_output]
            .iter()
            .filter_map(|e| match e {
                Event::Attempt { route, .. } => Some(route),
                _ => None,
            })
            .collect();
        let last_route = routes_before.last().cloned();
        for e in &events[first_output..] {
            if let Event::Attempt { route, .. } = e {
                prop_assert_eq!(
                    Some(route),
                    last_route,
                    "after output the run stays on its route"
                );
            }
        }
    }
    if continuation {
        let step1 = events
            .iter()
            .filter(|e| matches!(e, Event::Attempt { step: 1, .. }))
            .count();
        prop_assert_eq!(
            step1,
            1,
            "a continuation makes exactly one attempt at step 1: {:?}",
            events
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 160, ..ProptestConfig::default() })]

    #[test]
    fn budget_and_walk_rules_hold(
        shared in chain_strategy(),
        kind in kind_strategy(),
        script in proptest::collection::vec(scripted(), 0..40),
        continuation in proptest::bool::weighted(0.2),
        summary in proptest::bool::weighted(0.3),
    ) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(check_case(shared, kind, script, continuation, summary))?;
    }
}
