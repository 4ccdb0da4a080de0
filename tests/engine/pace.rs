//! Pacing end to end (docs/design.md §4.2, §4.4): the engine calls the simulator over real HTTP
//! with the in-process fleet, whose limiter runs on the same clock as the simulator's windows.
//! The pool is OpenRouter's free one, declared at 20 calls a minute; assertions read the
//! simulator's call log.

use crate::support;

use freeway::catalog::Catalog;
use freeway::clock::Clock;
use freeway::engine::{Outcome, WhenResting};
use freeway::job::{RunJob, RunRequest};
use freeway::pace::{Pacer, WINDOW_GUARD_MS};
use freeway::provider::{HttpProvider, Timeouts};
use freeway::rest::Rests;
use freeway::route::{OPENROUTER_FREE_POOL, Route, RouteSpec};
use freeway::run::RunStatus;
use std::sync::Arc;
use std::time::Duration;

const FREE_A: &str = "meta-llama/llama-3.3-70b-instruct:free";
const FREE_B: &str = "qwen/qwen3-coder:free";
const PAID: &str = "openai/gpt-4o-mini";
const MINUTE: u64 = 60_000;

struct Setup {
    sim: sim::SimHandle,
    h: support::Harness,
}

/// A simulator allowing `rpm` free calls a minute, and an engine whose pool is declared at 20;
/// both clocks are moved to just after a minute starts, so a test never straddles two windows.
async fn setup(rpm: u32) -> Setup {
    let s = Setup::start(sim::SimConfig {
        rpm,
        ..Default::default()
    })
    .await;
    s.advance(MINUTE - s.h.clock.now_ms() % MINUTE + 100);
    s
}

impl Setup {
    /// A simulator playing `config`, and an engine on the built-in catalog calling it.
    async fn start(config: sim::SimConfig) -> Setup {
        let sim = sim::start(config, "127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let provider = Arc::new(HttpProvider::new(Timeouts::default()).unwrap());
        let h = support::harness(provider, &sim.base_url());
        Setup { sim, h }
    }

    /// Move the engine's clock and the simulator's together.
    fn advance(&self, ms: u64) {
        self.h.clock.advance(Duration::from_millis(ms));
        self.sim.advance_clock(ms);
    }

    fn job(&self, user: &str, models: &[&str]) -> RunJob {
        let request = RunRequest {
            deadline_s: Some(3_600),
            ..RunRequest::new(
                user,
                "hi",
                models
                    .iter()
                    .map(|m| RouteSpec::parse_cli(m, &Catalog::builtin()))
                    .collect(),
            )
        };
        RunJob::new(request, self.h.clock.now_ms())
    }

    async fn execute(&self, job: &RunJob) -> Outcome {
        let routes = job.check(&Catalog::builtin()).unwrap();
        self.h
            .engine
            .execute(job, &routes, WhenResting::Snooze)
            .await
            .unwrap()
    }

    /// `(model, status)` of every call the simulator saw.
    fn calls(&self) -> Vec<(String, u16)> {
        let calls = self.sim.calls().into_iter();
        calls.map(|c| (c.model, c.status)).collect()
    }
}

fn succeeded(outcome: &Outcome) -> bool {
    matches!(
        outcome,
        Outcome::Finished {
            status: RunStatus::Succeeded,
            ..
        }
    )
}

#[tokio::test]
async fn a_full_pool_closes_its_routes_without_a_call_and_runs_move_on() {
    let s = setup(20).await;
    for n in 0..25 {
        let outcome = s
            .execute(&s.job(&format!("u{n}"), &[FREE_A, FREE_B, PAID]))
            .await;
        assert!(succeeded(&outcome), "run {n}: {outcome:?}");
    }
    let calls = s.calls();
    let free = calls.iter().filter(|(m, _)| m.ends_with(":free")).count();
    let paid = calls.iter().filter(|(m, _)| m == PAID).count();
    assert_eq!(
        (free, paid),
        (20, 5),
        "20 free calls fill the minute; the rest go paid"
    );
    assert!(
        calls.iter().all(|(_, status)| *status == 200),
        "no 429 earned: {calls:?}"
    );
    assert!(
        s.h.rests.list().await.unwrap().is_empty(),
        "a full pool is not a rest"
    );
}

#[tokio::test]
async fn waiting_runs_take_their_place_in_the_pools_queue_and_are_handed_slots_in_turn() {
    let s = setup(20).await;
    for n in 0..20 {
        assert!(succeeded(
            &s.execute(&s.job(&format!("u{n}"), &[FREE_A])).await
        ));
    }
    let window_end = s.h.clock.now_ms() / MINUTE * MINUTE + MINUTE;
    let mut parked = Vec::new();
    for n in 0..25 {
        let mut job = s.job(&format!("w{n:02}"), &[FREE_A, FREE_B]);
        // One tenant's runs keep their order (other tenants' would share the slots).
        job.request.tenant = Some("acme".into());
        let Outcome::Snoozed { until_ms, slot, .. } = s.execute(&job).await else {
            panic!("a run without an open route waits")
        };
        let place = slot.expect("it has a place in the pool's queue");
        assert!(place.queued && place.pool == OPENROUTER_FREE_POOL);
        // It wakes at about its turn, should nobody wake it then: 20 a window, in order.
        let window = (until_ms - window_end) / MINUTE;
        assert_eq!(window, u64::from(n >= 20), "w{n} wakes at {until_ms}");
        job.slot = Some(place);
        parked.push(job);
    }
    assert_eq!(s.calls().len(), 20, "waiting took no call");
    assert_eq!(
        s.h.engine.dispatch_turns().await.unwrap(),
        Vec::<String>::new()
    );

    // The next minute: its 20 slots are handed out to the first 20 in line, who call once
    // each; a newcomer waits behind the five still in line.
    s.advance(window_end + WINDOW_GUARD_MS + 250 - s.h.clock.now_ms());
    let granted = s.h.engine.dispatch_turns().await.unwrap();
    let first: Vec<String> = parked[..20].iter().map(|j| j.run_id.clone()).collect();
    assert_eq!(granted, first, "slots go to the runs in line, in order");
    for job in &parked[..20] {
        assert!(succeeded(&s.execute(job).await));
    }
    let newcomer = s.execute(&s.job("late", &[FREE_A])).await;
    assert!(matches!(newcomer, Outcome::Snoozed { .. }), "{newcomer:?}");
    assert_eq!(s.calls().len(), 40);
    assert!(s.calls().iter().all(|(_, status)| *status == 200));
}

/// One tenant's batch fills the line; another tenant's run that comes later is handed the next
/// slot, not the batch's 41st: slots go to waiting tenants by weight, not first come first
/// served (docs/design.md §4.7).
#[tokio::test]
async fn a_tenant_that_comes_later_is_not_served_after_anothers_whole_batch() {
    let s = setup(20).await;
    let mut batch = Vec::new();
    for _ in 0..60 {
        let mut job = s.job("a", &[FREE_A]);
        job.request.tenant = Some("acme".into());
        job.request.priority = Some(freeway::job::Priority::Batch);
        if let Outcome::Snoozed { slot, .. } = s.execute(&job).await {
            job.slot = slot;
            batch.push(job);
        }
    }
    assert_eq!(batch.len(), 40, "20 ran in this minute, 40 wait");
    let mut other = s.job("b", &[FREE_A]);
    other.request.tenant = Some("globex".into());
    let Outcome::Snoozed { slot, .. } = s.execute(&other).await else {
        panic!("the pool is full")
    };
    other.slot = slot;
    s.advance(MINUTE);
    let granted = s.h.engine.dispatch_turns().await.unwrap();
    assert_eq!(granted.len(), 20);
    assert_eq!(
        granted[0], other.run_id,
        "the interactive run of the other tenant goes first"
    );
    assert!(succeeded(&s.execute(&other).await));
}

#[tokio::test]
async fn a_refusal_the_limiter_let_through_is_a_pacing_miss_that_teaches_the_limit() {
    // The pool is declared at 20 a minute; the account allows 5.
    let s = setup(5).await;
    for n in 0..8 {
        let outcome = s.execute(&s.job(&format!("u{n}"), &[FREE_A, PAID])).await;
        assert!(succeeded(&outcome), "{outcome:?}");
    }
    let statuses: Vec<u16> = s.calls().iter().map(|(_, status)| *status).collect();
    // Five free calls, the sixth refused (and rests the pool), then paid for the rest.
    assert_eq!(
        statuses,
        [vec![200; 5], vec![429, 200], vec![200; 2]].concat()
    );
    let route = Route::parse(FREE_A, &Catalog::builtin()).unwrap();
    let limits = route.pace.expect("the free pool declares its limit");
    let usage =
        s.h.pace
            .usage(OPENROUTER_FREE_POOL, &limits, u64::MAX)
            .await
            .unwrap();
    assert_eq!(usage.misses, 1);
    assert_eq!(
        usage.learned.per_window,
        Some(5),
        "the refusal's X-RateLimit-Limit is learned"
    );
    assert_eq!(usage.window_used, 6, "the six calls made are counted");
    assert!(
        matches!(
            s.h.pace
                .peek(OPENROUTER_FREE_POOL, &limits, u64::MAX, 0)
                .await
                .unwrap(),
            freeway::pace::Slot::In(_)
        ),
        "the window is full at the stated limit"
    );
    assert_eq!(
        usage.learned.working_per_window, None,
        "a refusal that states its limit lowers nothing below it"
    );
}

#[tokio::test]
async fn a_continuation_is_never_paced_out() {
    let s = setup(40).await;
    let mut job = s.job("u1", &[FREE_A]);
    job.request.input = Some("delete it [[tools:1]] [[tool:delete]]".into());
    job.request.tools = vec![freeway::chat::ToolSpec {
        name: "delete".into(),
        description: "deletes".into(),
        parameters: serde_json::json!({"type": "object"}),
        approval: freeway::chat::Approval::Required,
    }];
    let Outcome::AwaitingApproval(call) = s.execute(&job).await else {
        panic!("the run pauses for its approval")
    };
    for n in 0..19 {
        assert!(succeeded(
            &s.execute(&s.job(&format!("u{n}"), &[FREE_A])).await
        ));
    }
    let route = Route::parse(FREE_A, &Catalog::builtin()).unwrap();
    let limits = route.pace.unwrap();
    let peek =
        s.h.pace
            .peek(OPENROUTER_FREE_POOL, &limits, u64::MAX, 0)
            .await
            .unwrap();
    assert!(
        matches!(peek, freeway::pace::Slot::In(_)),
        "the pool is full: {peek:?}"
    );

    let mut cont = RunJob::new(
        RunRequest {
            input: Some("(continuation)".into()),
            conversation_id: Some(job.conversation_id.clone()),
            ..job.request.clone()
        },
        s.h.clock.now_ms(),
    );
    cont.conversation_id = job.conversation_id.clone();
    cont.continuation = Some(freeway::job::Continuation {
        parent_run_id: job.run_id.clone(),
        tool_call: call,
        result: "deleted".into(),
    });
    let outcome = s.execute(&cont).await;
    assert!(
        succeeded(&outcome),
        "a continuation tries once, full pool or not: {outcome:?}"
    );
    assert_eq!(s.calls().len(), 21);
}

/// `wait_for_free_s` on the system clock: a pool declared at 2 calls per 2 s window, as the
/// simulator plays it. The calls the simulator saw, and whether the third run published that
/// it waited in place.
async fn waiting_run(wait_for_free_s: Option<u32>) -> (Vec<(String, u16)>, bool) {
    let config = sim::SimConfig {
        rpm: 2,
        window_s: 2,
        ..Default::default()
    };
    let sim = sim::start(config, "127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let toml = format!(
        "[providers.openrouter]\nbase_url = \"{}\"\n[pools.openrouter-free]\nrpm = 2\nwindow_s = 2\n",
        sim.base_url()
    );
    let catalog = Arc::new(Catalog::from_toml(&toml).unwrap());
    let keys = [(
        "openrouter".to_string(),
        freeway::provider::ApiKey::new("k"),
    )];
    let targets = Arc::new(freeway::provider::EnvTargets::new(
        catalog.clone(),
        keys.into_iter().collect(),
    ));
    let events = Arc::new(freeway::events::MemoryEvents::default());
    let fleet = freeway::fleet::Fleet {
        events: events.clone(),
        ..freeway::fleet::Fleet::in_memory()
    };
    let engine = freeway::engine::Engine::new(
        Arc::new(HttpProvider::new(Timeouts::default()).unwrap()),
        targets,
        Arc::new(freeway::store::MemoryStore::default()),
        fleet,
    );
    // Start early in a window, so that the window's two calls and the third run fall in it.
    let now = freeway::clock::epoch_ms();
    if now % 2_000 > 1_000 {
        tokio::time::sleep(Duration::from_millis(2_050 - now % 2_000)).await;
    }
    let request = |user: &str, models: &[&str], wait: Option<u32>| RunRequest {
        wait_for_free_s: wait,
        ..RunRequest::new(
            user,
            "hi",
            models
                .iter()
                .map(|m| RouteSpec::parse_cli(m, &catalog))
                .collect(),
        )
    };
    let mut waited = false;
    for (user, wait) in [("u1", None), ("u2", None), ("u3", wait_for_free_s)] {
        let job = RunJob::new(
            request(user, &[FREE_A, PAID], wait),
            freeway::clock::epoch_ms(),
        );
        let run_id = job.run_id.clone();
        let routes = job.check(&catalog).unwrap();
        let outcome = engine
            .execute(&job, &routes, WhenResting::Snooze)
            .await
            .unwrap();
        assert!(succeeded(&outcome), "{outcome:?}");
        waited = events.of(&run_id).iter().any(|e| {
            matches!(e, freeway::events::Event::Waiting { until_ms, .. } if *until_ms > job.enqueued_ms)
        });
    }
    let calls = sim
        .calls()
        .into_iter()
        .map(|c| (c.model, c.status))
        .collect();
    (calls, waited)
}

#[tokio::test]
async fn a_run_may_wait_in_place_for_the_next_free_slot_instead_of_paying() {
    let free = |n: usize| vec![(FREE_A.to_string(), 200); n];
    assert_eq!(
        waiting_run(None).await,
        ([free(2), vec![(PAID.to_string(), 200)]].concat(), false),
        "without a wait, a full pool sends the run on"
    );
    assert_eq!(
        waiting_run(Some(5)).await,
        (free(3), true),
        "with one, the run takes the next window's slot, and says it waits"
    );
}

#[tokio::test]
async fn the_end_of_a_guessed_rest_is_probed_by_one_call_of_the_whole_fleet() {
    let s = setup(20).await;
    let pool = freeway::classify::RestScope::Pool(OPENROUTER_FREE_POOL.into());
    let length = freeway::classify::RestLength::Guess(60_000);
    s.h.rests.write(&pool, length, "ambiguous").await.unwrap();
    s.advance(61_000);
    // Three replicas share the fleet; thirty runs were waiting for the rest to end.
    let replicas: Vec<freeway::engine::Engine> = (0..3)
        .map(|_| s.h.engine_on(s.h.targets.clone(), s.h.fleet()))
        .collect();
    let jobs: Vec<RunJob> = (0..30)
        .map(|n| s.job(&format!("u{n}"), &[FREE_A]))
        .collect();
    let outcomes = futures_util::future::join_all(jobs.iter().enumerate().map(|(n, job)| {
        let engine = &replicas[n % 3];
        let routes = job.check(&Catalog::builtin()).unwrap();
        async move {
            engine
                .execute(job, &routes, WhenResting::Snooze)
                .await
                .unwrap()
        }
    }))
    .await;
    assert_eq!(s.calls().len(), 1, "one probe: {:?}", s.calls());
    let now = s.h.clock.now_ms();
    let waiting: Vec<u64> = outcomes
        .iter()
        .filter_map(|o| match o {
            Outcome::Snoozed { until_ms, .. } => Some(*until_ms),
            _ => None,
        })
        .collect();
    assert_eq!(waiting.len(), 29, "{outcomes:?}");
    assert!(
        waiting.iter().all(|&t| t <= now + 4_000),
        "they look again soon: {waiting:?}"
    );

    // The probe answered: the others call now, as the pool's pace allows.
    for job in &jobs {
        s.execute(job).await;
    }
    let calls = s.calls();
    assert_eq!(calls.len(), 20, "the window's 20 slots");
    assert!(calls.iter().all(|(_, status)| *status == 200));
}

/// The built-in catalog with OpenRouter's free pool counting `tpm` tokens a minute.
fn counting_tokens(tpm: u32) -> Catalog {
    let dir = std::env::temp_dir().join(format!("freeway-tpm-{}", ulid::Ulid::generate()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("freeway.toml");
    std::fs::write(&file, format!("[pools.openrouter-free]\ntpm = {tpm}\n")).unwrap();
    let vars = [("FREEWAY_CONFIG".to_string(), file.display().to_string())].into();
    freeway::catalog::load(&vars).unwrap()
}

#[tokio::test]
async fn a_pool_counting_tokens_admits_by_the_answers_usage_not_the_estimate() {
    let s = setup(20).await;
    let catalog = counting_tokens(2_000);
    let run = |user: &str, max_tokens: u32| {
        let mut job = s.job(user, &[FREE_A]);
        job.request.max_tokens = Some(max_tokens);
        let routes = job.check(&catalog).unwrap();
        let engine = &s.h.engine;
        async move {
            engine
                .execute(&job, &routes, WhenResting::Snooze)
                .await
                .unwrap()
        }
    };
    // Admitted with 1,500 tokens of answer expected; the answer's usage is a few dozen.
    assert!(succeeded(&run("u1", 1_500).await));
    let route = Route::parse(FREE_A, &catalog).unwrap();
    let limits = route.pace.unwrap();
    let spent =
        s.h.pace
            .usage(OPENROUTER_FREE_POOL, &limits, u64::MAX)
            .await
            .unwrap();
    let used = spent.window_tokens;
    assert!(
        used > 0 && used < 200,
        "the window counts the answer's usage: {spent:?}"
    );
    // So a second 1,500 fits the minute, which the estimate alone would have closed.
    assert!(succeeded(&run("u2", 1_500).await));
    let spent =
        s.h.pace
            .usage(OPENROUTER_FREE_POOL, &limits, u64::MAX)
            .await
            .unwrap();
    // A call that cannot fit what is left is not made: the run waits for the next minute.
    let outcome = run("u3", 2_000 - spent.window_tokens + 1).await;
    assert!(matches!(outcome, Outcome::Snoozed { .. }), "{outcome:?}");
    assert_eq!(s.calls().len(), 2, "no call the pool's tokens cannot take");
    assert!(s.calls().iter().all(|(_, status)| *status == 200));
}

/// A run that waits its turn and is woken before it (an operator's "run now", a redelivery)
/// keeps one place in the pool's queue; when its turn comes without anybody handing out the
/// window (no replica's housekeeping ran), it takes its slot itself, and the window and the day
/// count it once.
#[tokio::test]
async fn a_run_woken_again_keeps_one_place_and_its_slot_is_counted_once() {
    let s = setup(20).await;
    for n in 0..20 {
        assert!(succeeded(
            &s.execute(&s.job(&format!("u{n}"), &[FREE_A])).await
        ));
    }
    let mut job = s.job("w", &[FREE_A]);
    let Outcome::Snoozed { slot, .. } = s.execute(&job).await else {
        panic!("a run without an open route waits")
    };
    job.slot = slot;
    let route = Route::parse(FREE_A, &Catalog::builtin()).unwrap();
    let limits = route.pace.expect("a pool route");
    let usage = || {
        let day_end = route.day.day_end_ms(s.h.clock.now_ms());
        s.h.pace.usage(OPENROUTER_FREE_POOL, &limits, day_end)
    };
    let waiting = usage().await.unwrap();
    assert_eq!((waiting.waiting, waiting.day_used), (1, 20));
    // Woken again while the window is still full: it has one place, not two.
    let Outcome::Snoozed { slot, .. } = s.execute(&job).await else {
        panic!("still no room")
    };
    job.slot = slot;
    assert_eq!(usage().await.unwrap().waiting, 1);
    // The next window begins; the run wakes on its own and finds its turn.
    let window_end = s.h.clock.now_ms() / MINUTE * MINUTE + MINUTE;
    s.advance(window_end + 100 - s.h.clock.now_ms());
    let outcome = s.execute(&job).await;
    let outcome = match outcome {
        // Granted as it asked: it comes back for its slot.
        Outcome::Snoozed { slot, .. } => {
            job.slot = slot;
            s.execute(&job).await
        }
        outcome => outcome,
    };
    assert!(succeeded(&outcome), "{outcome:?}");
    let after = usage().await.unwrap();
    assert_eq!(
        (after.window_used, after.waiting, after.day_used),
        (1, 0, 21),
        "the run's call is counted once in the window and the day"
    );
}

/// A day refusal of a pool that declares no day limit teaches the limit (what the refusal
/// states, here the simulator's `X-RateLimit-Limit`), and is no pacing miss.
#[tokio::test]
async fn a_day_refusal_teaches_the_day_limit_and_is_no_pacing_miss() {
    let s = Setup::start(sim::SimConfig {
        rpm: 20,
        rpd: 3,
        ..Default::default()
    })
    .await;
    for n in 0..4 {
        s.execute(&s.job(&format!("u{n}"), &[FREE_A, PAID])).await;
    }
    let statuses: Vec<u16> = s.calls().iter().map(|(_, status)| *status).collect();
    assert_eq!(
        statuses,
        [200, 200, 200, 429, 200],
        "the fourth free call met the day"
    );
    let route = Route::parse(FREE_A, &Catalog::builtin()).unwrap();
    let limits = route.pace.expect("a pool route");
    let day_end = route.day.day_end_ms(s.h.clock.now_ms());
    let usage =
        s.h.pace
            .usage(OPENROUTER_FREE_POOL, &limits, day_end)
            .await
            .unwrap();
    assert_eq!(usage.learned.per_day, Some(3), "{usage:?}");
    assert_eq!(usage.misses, 0, "a day learned is no pacing miss");
    let next =
        s.h.pace
            .peek(OPENROUTER_FREE_POOL, &limits, day_end, 0)
            .await
            .unwrap();
    assert!(
        matches!(next, freeway::pace::Slot::In(ms) if ms > MINUTE),
        "closed for the day: {next:?}"
    );
}

/// docs/design.md §4.4, phase: the provider's window opened at the key's first call, so it ends
/// 8 s from now while the epoch's minute ends in 50 s. The refusal that says so realigns the
/// pool's window, and the runs it closes go at the provider's reset (within its guard and
/// jitter), not at the epoch-aligned guess.
#[tokio::test]
async fn a_run_closed_by_a_window_the_provider_says_ends_goes_at_that_moment() {
    let s = Setup::start(sim::SimConfig {
        rpm: 2,
        window_align: sim::WindowAlign::FirstCall,
        ..Default::default()
    })
    .await;
    // Second 18 of a minute: the key's window opens with the first call.
    s.advance(MINUTE - s.h.clock.now_ms() % MINUTE + 18_000);
    for n in 0..2 {
        assert!(succeeded(
            &s.execute(&s.job(&format!("u{n}"), &[FREE_A])).await
        ));
    }
    let reset = s.sim.calls()[0].t_ms + MINUTE;
    // Second 10 of the next minute: the epoch's window is new, the provider's is not.
    s.advance(52_000);
    let now = s.h.clock.now_ms();
    assert_eq!(now % MINUTE / 1000, 10);
    assert!(
        reset.abs_diff(now + 8_000) < 1_000,
        "the provider's window ends in 8 s"
    );
    for user in ["closed-by-the-refusal", "arrives-after"] {
        let Outcome::Snoozed { until_ms, .. } = s.execute(&s.job(user, &[FREE_A])).await else {
            panic!("{user}: a run with its only route closed waits")
        };
        assert!(
            (reset..=reset + 1_000).contains(&until_ms),
            "{user} goes at the provider's reset, {} ms from now, not in {} ms: it waits {} ms",
            reset - now,
            MINUTE - now % MINUTE,
            until_ms.saturating_sub(now)
        );
    }
    let statuses: Vec<u16> = s.calls().iter().map(|(_, status)| *status).collect();
    assert_eq!(
        statuses,
        [200, 200, 429],
        "one refusal taught the window's end"
    );
}
