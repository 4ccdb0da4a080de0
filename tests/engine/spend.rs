//! Spend caps end to end (docs/design.md §4.8): the engine calls the simulator over real HTTP
//! (it prices paid models and reports `usage.cost` when asked), with the in-process ledger;
//! assertions read the simulator's call log, the run and its attempts.

use crate::support;

use freeway::catalog::Catalog;
use freeway::engine::{Outcome, WhenResting};
use freeway::job::{RunJob, RunRequest};
use freeway::provider::{HttpProvider, Timeouts};
use freeway::route::RouteSpec;
use freeway::run::{Code, RunStatus};
use freeway::spend::{Ledger, LedgerId};
use freeway::store::Store;
use std::sync::Arc;

const PAID: &str = "openai/gpt-4o-mini";
const FREE: &str = "meta-llama/llama-3.3-70b-instruct:free";

struct Setup {
    sim: sim::SimHandle,
    h: support::Harness,
    catalog: Arc<Catalog>,
}

/// A simulator, and an engine whose configuration is `toml` over the built-in one.
async fn setup(toml: &str) -> Setup {
    let sim = sim::start(sim::SimConfig::default(), "127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let provider = Arc::new(HttpProvider::new(Timeouts::default()).unwrap());
    let mut h = support::harness(provider, &sim.base_url());
    let catalog = Arc::new(Catalog::from_toml(toml).unwrap());
    h.engine = h.engine.clone().with_catalog(catalog.clone());
    Setup { sim, h, catalog }
}

impl Setup {
    fn job(&self, tenant: &str, input: &str, models: &[&str]) -> RunJob {
        let request = RunRequest {
            deadline_s: Some(600),
            max_tokens: Some(100),
            tenant: Some(tenant.into()),
            ..RunRequest::new(
                "u1",
                input,
                models
                    .iter()
                    .map(|m| RouteSpec::parse_cli(m, &self.catalog))
                    .collect(),
            )
        };
        RunJob::new(request, freeway::clock::epoch_ms())
    }

    async fn execute(&self, job: &RunJob) -> Outcome {
        let routes = job.check(&self.catalog).unwrap();
        self.h
            .engine
            .execute(job, &routes, WhenResting::Snooze)
            .await
            .unwrap()
    }

    /// What the simulator charged, call by call.
    fn charged(&self) -> Vec<f64> {
        self.sim.calls().iter().filter_map(|c| c.cost_usd).collect()
    }
}

#[tokio::test]
async fn a_priced_calls_cost_is_the_providers_figure_on_the_attempt_and_the_run() {
    // A cap far away: the ledger counts the tenant's day (uncapped, it is not asked at all).
    let s = setup("[tiers.default]\nspend_usd_per_day = 10.0\n").await;
    let job = s.job("acme", "hello there", &[PAID]);
    let outcome = s.execute(&job).await;
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
    let charged = s.charged();
    assert_eq!(charged.len(), 1);
    assert!(charged[0] > 0.0, "the simulator prices the paid model");
    let attempts = s.h.store.attempts(&job.run_id).await.unwrap();
    assert!(
        (attempts[0].cost_usd - charged[0]).abs() < 1e-9,
        "{attempts:?} {charged:?}"
    );
    let run = s.h.store.run(&job.run_id).await.unwrap().unwrap();
    assert!((run.cost_usd - charged[0]).abs() < 1e-9);
    let today =
        s.h.spend
            .usage(
                &LedgerId::new("acme").unwrap(),
                freeway::day::next_midnight_ms(chrono_tz::UTC, freeway::clock::epoch_ms()),
            )
            .await
            .unwrap();
    assert!((today.spent.usd() - charged[0]).abs() < 1e-8, "{today:?}");
    // A free route costs nothing and asks for no figure.
    let free = s.job("acme", "hi", &[FREE]);
    s.execute(&free).await;
    let attempts = s.h.store.attempts(&free.run_id).await.unwrap();
    assert_eq!(attempts[0].cost_usd, 0.0);
}

/// A tenant's tier caps its day: calls are made while what they may cost fits, then the priced
/// route closes; a run with only priced routes is refused `spend_cap_reached` without a call.
#[tokio::test]
async fn a_tenant_at_its_tiers_cap_is_refused_without_a_call() {
    // 0.1 / 0.4 USD per million tokens, as the simulator prices it: a call of ~30 input tokens
    // and 100 answer tokens is held at ~0.000043 USD; the cap lets three through.
    let s = setup(
        "[tiers.default]\nspend_usd_per_day = 0.00013\n\
         [prices]\n\"openai/gpt-4o-mini\" = { input = 0.1, output = 0.4 }\n",
    )
    .await;
    let mut outcomes = Vec::new();
    for _ in 0..5 {
        let job = s.job(
            "acme",
            "a question of about thirty tokens, give or take a few more",
            &[PAID],
        );
        outcomes.push(s.execute(&job).await);
    }
    let refused = outcomes
        .iter()
        .filter(|o| {
            matches!(
                o,
                Outcome::Refused {
                    code: Code::SpendCapReached,
                    ..
                }
            )
        })
        .count();
    let made = s.sim.calls().len();
    assert!(made >= 1 && made + refused == 5, "{outcomes:?}");
    let spent: f64 = s.charged().iter().sum();
    assert!(spent <= 0.00013 + 1e-12, "spent {spent} past the cap");
    // Another tenant of the same tier has its own day.
    let other = s.job("globex", "hi", &[PAID]);
    assert!(matches!(
        s.execute(&other).await,
        Outcome::Finished {
            status: RunStatus::Succeeded,
            ..
        }
    ));
}

/// A run's `max_usd` caps that run: a tool loop on a priced route stops at the call that would
/// pass it, `spend_cap_reached`, and a chain with a free route after the priced one goes on
/// there.
#[tokio::test]
async fn a_runs_max_usd_ends_its_tool_loop_at_the_call_that_would_pass_it() {
    let s = setup("[prices]\n\"openai/gpt-4o-mini\" = { input = 0.1, output = 0.4 }\n").await;
    let mut job = s.job("acme", "loop [[tools:4]]", &[PAID]);
    job.request.tools = vec![
        serde_json::from_value(serde_json::json!({
            "name": "search", "description": "d", "parameters": {"type": "object"}
        }))
        .unwrap(),
    ];
    job.request.max_usd = Some(0.00005);
    let outcome = s.execute(&job).await;
    assert!(
        matches!(
            outcome,
            Outcome::Finished {
                code: Some(Code::SpendCapReached),
                ..
            }
        ),
        "{outcome:?}"
    );
    let spent: f64 = s.charged().iter().sum();
    assert!(spent <= 0.00005 + 1e-12, "spent {spent}");
    assert!(s.sim.calls().len() < 5, "the loop was cut short");
    assert!(!s.sim.calls().is_empty());
    // A priced route closed by the run's cap leaves the free one after it.
    let mut job = s.job("acme", "hi", &[PAID, FREE]);
    job.request.max_usd = Some(0.000_000_1);
    let before = s.sim.calls().len();
    let outcome = s.execute(&job).await;
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
    let calls = s.sim.calls();
    assert_eq!(calls.len(), before + 1);
    assert_eq!(
        calls.last().unwrap().model,
        FREE,
        "the capped priced route was skipped"
    );
}
