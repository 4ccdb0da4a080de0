//! The spend ledger (`freeway::spend`) as one suite run on both implementations: the Redis one
//! (each test in its own namespace) and the in-process one. Then what must hold whatever the
//! order of calls: a model of the rules checked against both, and the caps' bound under
//! concurrent reservations.

use crate::support;

use freeway::clock::{Clock, epoch_ms};
use freeway::spend::{
    Cap, Caps, DAY_KEPT_MS, Ledger, LedgerId, MemoryLedger, RUN_KEPT_MS, RedisLedger, Reservation,
    Reserve, TenantSpend, Usd,
};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

const HOUR: u64 = 3_600_000;

fn usd(v: f64) -> Usd {
    Usd::from_usd(v).unwrap()
}

fn id(s: &str) -> LedgerId {
    LedgerId::new(s).unwrap()
}

/// A day end that no test crosses.
fn day_end() -> u64 {
    epoch_ms() + 10 * HOUR
}

fn tenant_cap(v: f64) -> Caps {
    Caps {
        tenant: Some(usd(v)),
        run: None,
    }
}

/// A clock that moves only when told: the in-process ledger's holds lapse exactly on cue.
#[derive(Default)]
struct ManualClock {
    ahead_ms: AtomicU64,
    start_ms: u64,
}

impl ManualClock {
    fn new() -> ManualClock {
        ManualClock {
            ahead_ms: AtomicU64::new(0),
            start_ms: epoch_ms(),
        }
    }

    fn advance(&self, ms: u64) {
        self.ahead_ms.fetch_add(ms, Ordering::SeqCst);
    }
}

#[async_trait::async_trait]
impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        self.start_ms + self.ahead_ms.load(Ordering::SeqCst)
    }
    async fn sleep(&self, duration: Duration) {
        self.advance(duration.as_millis() as u64);
    }
    fn jitter_ms(&self, _lo: u64, hi: u64) -> u64 {
        hi
    }
}

enum Backend {
    Memory(Arc<ManualClock>),
    Redis(freeway::connect::RedisConnection, String),
}

struct Fixture {
    ledger: Arc<dyn Ledger>,
    backend: Backend,
}

impl Fixture {
    fn memory() -> Fixture {
        let clock = Arc::new(ManualClock::new());
        Fixture {
            ledger: Arc::new(MemoryLedger::new(clock.clone())),
            backend: Backend::Memory(clock),
        }
    }

    /// The Redis implementation, or `None` (said) without a Redis to test it on.
    async fn redis() -> Option<Fixture> {
        let conn = support::skip::redis().await?;
        let ns = support::unique_ns("spend");
        Some(Fixture {
            ledger: Arc::new(RedisLedger::new(conn.clone(), ns.clone())),
            backend: Backend::Redis(conn, ns),
        })
    }

    /// A ledger on the same backend (and the same state, in Redis) whose reservations lapse
    /// after `hold_ms`.
    fn holding(&self, hold_ms: u64) -> Arc<dyn Ledger> {
        match &self.backend {
            Backend::Memory(clock) => {
                Arc::new(MemoryLedger::new(clock.clone()).with_hold_ms(hold_ms))
            }
            Backend::Redis(conn, ns) => {
                Arc::new(RedisLedger::new(conn.clone(), ns.clone()).with_hold_ms(hold_ms))
            }
        }
    }

    /// Let `ms` pass for the ledger: its clock, or real time for Redis.
    async fn pass(&self, ms: u64) {
        match &self.backend {
            Backend::Memory(clock) => clock.advance(ms),
            Backend::Redis(..) => tokio::time::sleep(Duration::from_millis(ms)).await,
        }
    }
}

async fn reserve(ledger: &dyn Ledger, run: &str, day: u64, estimate: f64, caps: Caps) -> Reserve {
    ledger
        .reserve(&id("acme"), &id(run), day, usd(estimate), caps)
        .await
        .unwrap()
}

fn granted(r: Reserve) -> Reservation {
    match r {
        Reserve::Granted(r) => r,
        other => panic!("expected a grant, got {other:?}"),
    }
}

fn refused(which: Cap) -> Reserve {
    Reserve::Refused { which }
}

async fn usage(ledger: &dyn Ledger, day: u64) -> TenantSpend {
    ledger.usage(&id("acme"), day).await.unwrap()
}

fn spend(spent: f64, reserved: f64) -> TenantSpend {
    TenantSpend {
        spent: usd(spent),
        reserved: usd(reserved),
    }
}

async fn a_reservation_within_the_cap_is_granted_and_one_past_it_refused(f: Fixture) {
    let l = f.ledger.as_ref();
    let day = day_end();
    let caps = tenant_cap(1.0);
    let first = granted(reserve(l, "run_1", day, 0.4, caps).await);
    assert_eq!(first.estimate(), usd(0.4));
    let second = granted(reserve(l, "run_2", day, 0.4, caps).await);
    assert_ne!(first.id(), second.id());
    assert_eq!(
        reserve(l, "run_3", day, 0.4, caps).await,
        refused(Cap::Tenant)
    );
    granted(reserve(l, "run_3", day, 0.2, caps).await);
    assert_eq!(
        reserve(l, "run_3", day, 1e-9, caps).await,
        refused(Cap::Tenant),
        "the cap is reached exactly: not a nano-dollar more"
    );
    assert_eq!(usage(l, day).await, spend(0.0, 1.0));
    granted(reserve(l, "run_3", day, 5.0, Caps::default()).await);
    assert_eq!(
        usage(l, day).await,
        spend(0.0, 6.0),
        "no cap: counted all the same"
    );
    assert_eq!(
        l.usage(&id("other"), day).await.unwrap(),
        TenantSpend::default()
    );
}

async fn a_run_past_its_own_cap_is_refused_and_other_runs_are_not(f: Fixture) {
    let l = f.ledger.as_ref();
    let day = day_end();
    let caps = Caps {
        tenant: Some(usd(1.0)),
        run: Some(usd(0.5)),
    };
    granted(reserve(l, "run_1", day, 0.3, caps).await);
    assert_eq!(reserve(l, "run_1", day, 0.3, caps).await, refused(Cap::Run));
    granted(reserve(l, "run_1", day, 0.2, caps).await);
    granted(reserve(l, "run_2", day, 0.3, caps).await);
    assert_eq!(
        reserve(l, "run_3", day, 0.6, caps).await,
        refused(Cap::Run),
        "past both caps: the run's is named"
    );
    assert_eq!(
        reserve(l, "run_3", day, 0.3, caps).await,
        refused(Cap::Tenant)
    );
    assert_eq!(usage(l, day).await, spend(0.0, 0.8));
}

async fn a_settle_replaces_the_estimate_higher_or_lower(f: Fixture) {
    let l = f.ledger.as_ref();
    let day = day_end();
    let caps = Caps {
        tenant: Some(usd(1.0)),
        run: Some(usd(0.6)),
    };
    let r = granted(reserve(l, "run_1", day, 0.5, caps).await);
    l.settle(&r, usd(0.1)).await.unwrap();
    assert_eq!(usage(l, day).await, spend(0.1, 0.0));
    let r = granted(reserve(l, "run_1", day, 0.5, caps).await);
    l.settle(&r, usd(0.7)).await.unwrap();
    assert_eq!(
        usage(l, day).await,
        spend(0.8, 0.0),
        "an answer dearer than its estimate is counted whole"
    );
    l.settle(&r, usd(0.7)).await.unwrap();
    assert_eq!(usage(l, day).await, spend(0.8, 0.0), "settled once only");
    assert_eq!(
        reserve(l, "run_1", day, 0.0, caps).await,
        refused(Cap::Run),
        "the run spent past its cap: not even a free estimate"
    );
    granted(reserve(l, "run_2", day, 0.2, caps).await);
    assert_eq!(
        reserve(l, "run_2", day, 0.1, caps).await,
        refused(Cap::Tenant)
    );
    let failed = granted(reserve(l, "run_3", day, 0.0, Caps::default()).await);
    l.settle(&failed, Usd::ZERO).await.unwrap();
    assert_eq!(usage(l, day).await, spend(0.8, 0.2));
}

async fn a_new_day_starts_from_zero_but_a_run_keeps_its_spend(f: Fixture) {
    let l = f.ledger.as_ref();
    let today = day_end();
    let tomorrow = today + 24 * HOUR;
    let caps = Caps {
        tenant: Some(usd(1.0)),
        run: Some(usd(1.5)),
    };
    let r = granted(reserve(l, "run_1", today, 1.0, caps).await);
    l.settle(&r, usd(0.9)).await.unwrap();
    assert_eq!(
        reserve(l, "run_2", today, 0.2, caps).await,
        refused(Cap::Tenant)
    );
    granted(reserve(l, "run_2", tomorrow, 1.0, caps).await);
    assert_eq!(usage(l, tomorrow).await, spend(0.0, 1.0));
    assert_eq!(usage(l, today).await, spend(0.9, 0.0));
    assert_eq!(
        reserve(
            l,
            "run_1",
            tomorrow,
            0.61,
            Caps {
                tenant: None,
                ..caps
            }
        )
        .await,
        refused(Cap::Run),
        "a run's cap spans days"
    );
}

async fn a_reservation_never_settled_lapses_and_a_late_settle_still_counts(f: Fixture) {
    const HOLD_MS: u64 = 300;
    let l = f.holding(HOLD_MS);
    let l = l.as_ref();
    let day = day_end();
    let caps = Caps {
        tenant: Some(usd(1.0)),
        run: Some(usd(1.0)),
    };
    let dead = granted(reserve(l, "run_1", day, 0.6, caps).await);
    assert_eq!(reserve(l, "run_1", day, 0.6, caps).await, refused(Cap::Run));
    f.pass(HOLD_MS + 200).await;
    assert_eq!(
        usage(l, day).await,
        spend(0.0, 0.0),
        "the dead worker's hold lapsed"
    );
    let live = granted(reserve(l, "run_1", day, 0.6, caps).await);
    l.settle(&dead, usd(0.5)).await.unwrap();
    assert_eq!(
        usage(l, day).await,
        spend(0.5, 0.6),
        "its call was made after all: what it cost is counted"
    );
    l.settle(&dead, usd(0.5)).await.unwrap();
    l.settle(&live, usd(0.1)).await.unwrap();
    assert_eq!(usage(l, day).await, spend(0.6, 0.0));
    assert_eq!(reserve(l, "run_1", day, 0.5, caps).await, refused(Cap::Run));
}

/// 50 tasks × 20 reservations of 0.01 against a tenant cap of 1.00 and run caps of 0.25 over 5
/// runs: exactly 100 are granted, no run gets more than 25, and the day spends exactly the cap.
async fn concurrent_reservations_never_pass_the_caps_together(f: Fixture) {
    const TASKS: usize = 50;
    const EACH: usize = 20;
    let day = day_end();
    let caps = Caps {
        tenant: Some(usd(1.0)),
        run: Some(usd(0.25)),
    };
    let mut tasks = Vec::new();
    for task in 0..TASKS {
        let ledger = f.ledger.clone();
        tasks.push(tokio::spawn(async move {
            let run = format!("run_{}", task % 5);
            let mut granted = 0usize;
            for _ in 0..EACH {
                let r = reserve(ledger.as_ref(), &run, day, 0.01, caps).await;
                if let Reserve::Granted(r) = r {
                    granted += 1;
                    ledger.settle(&r, r.estimate()).await.unwrap();
                }
            }
            (task % 5, granted)
        }));
    }
    let mut by_run = [0usize; 5];
    for t in tasks {
        let (run, n) = t.await.unwrap();
        by_run[run] += n;
    }
    assert_eq!(by_run.iter().sum::<usize>(), 100, "{by_run:?}");
    assert!(by_run.iter().all(|&n| n <= 25), "{by_run:?}");
    assert_eq!(usage(f.ledger.as_ref(), day).await, spend(1.0, 0.0));
}

on_both!(
    a_reservation_within_the_cap_is_granted_and_one_past_it_refused,
    a_run_past_its_own_cap_is_refused_and_other_runs_are_not,
    a_settle_replaces_the_estimate_higher_or_lower,
    a_new_day_starts_from_zero_but_a_run_keeps_its_spend,
    a_reservation_never_settled_lapses_and_a_late_settle_still_counts,
    concurrent_reservations_never_pass_the_caps_together,
);

/// Each tenant's keys carry its hash tag and expire: a day's after the day ends, a run's after
/// a while; a refused reservation writes nothing.
#[tokio::test]
async fn redis_keys_are_tagged_by_tenant_and_expire() {
    let Some(conn) = support::skip::redis().await else {
        return;
    };
    let ns = support::unique_ns("spend");
    let ledger = RedisLedger::new(conn.clone(), ns.clone());
    let day = day_end();
    let (tenant, run) = (id("acme.org"), id("run_1"));
    let day_key = ledger.day_key(&tenant, day);
    let run_key = ledger.run_key(&tenant, &run);
    assert_eq!(day_key, format!("{ns}:spend:{{acme.org}}:day:{day}"));
    assert_eq!(run_key, format!("{ns}:spend:{{acme.org}}:run:run_1"));

    let r = ledger
        .reserve(&tenant, &run, day, usd(2.0), tenant_cap(1.0))
        .await
        .unwrap();
    assert_eq!(r, refused(Cap::Tenant));
    let mut c = conn.clone();
    let found: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{ns}:*"))
        .query_async(&mut c)
        .await
        .unwrap();
    assert!(found.is_empty(), "{found:?}");

    let r = granted(
        ledger
            .reserve(&tenant, &run, day, usd(0.5), tenant_cap(1.0))
            .await
            .unwrap(),
    );
    ledger.settle(&r, usd(0.25)).await.unwrap();
    let mut found: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{ns}:*"))
        .query_async(&mut c)
        .await
        .unwrap();
    found.sort();
    assert_eq!(
        found,
        vec![day_key.clone(), run_key.clone()],
        "no holds left"
    );
    let pttl = |key: String| {
        let mut c = conn.clone();
        async move {
            redis::cmd("PTTL")
                .arg(key)
                .query_async::<i64>(&mut c)
                .await
                .unwrap()
        }
    };
    let to_end = day - epoch_ms();
    let day_ttl = pttl(day_key).await as u64;
    // Redis reads its clock once an event loop turn: its PTTL may run a few ms behind ours.
    assert!(
        day_ttl <= to_end + DAY_KEPT_MS + 1_000 && day_ttl + 5_000 > to_end + DAY_KEPT_MS,
        "{day_ttl} against {}",
        to_end + DAY_KEPT_MS
    );
    let run_ttl = pttl(run_key.clone()).await as u64;
    assert!(
        run_ttl <= RUN_KEPT_MS && run_ttl + 5_000 > RUN_KEPT_MS,
        "{run_ttl}"
    );
    let spent: Option<String> = redis::cmd("HGET")
        .arg(&run_key)
        .arg("spent")
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(spent.as_deref(), Some("250000000"), "nano-dollars");
}

/// One step of a sequence of ledger calls.
#[derive(Debug, Clone)]
enum Op {
    /// Reserve `estimate` nano-dollars for run `run`, under run caps when `run_capped`.
    Reserve {
        run: usize,
        estimate: u64,
        run_capped: bool,
    },
    /// Settle the `which`-th reservation granted so far (modulo their number) at `actual`.
    Settle { which: usize, actual: u64 },
    /// Let time pass (the in-process ledger only), in steps of a third of a hold plus a bit,
    /// so that no hold ends within a step's rounding of a moment the model looks at.
    Pass { steps: u64 },
}

const PROP_HOLD_MS: u64 = 3_000;
const PROP_STEP_MS: u64 = 1_100;
const PROP_TENANT_CAP: u64 = 1_000;
const PROP_RUN_CAP: u64 = 600;

fn op(with_time: bool) -> BoxedStrategy<Op> {
    let reserve = (0usize..3, 0u64..=400, any::<bool>()).prop_map(|(run, estimate, run_capped)| {
        Op::Reserve {
            run,
            estimate,
            run_capped,
        }
    });
    let settle =
        (any::<usize>(), 0u64..=600).prop_map(|(which, actual)| Op::Settle { which, actual });
    if with_time {
        prop_oneof![4 => reserve, 3 => settle, 1 => (1u64..=3).prop_map(|steps| Op::Pass { steps })]
            .boxed()
    } else {
        prop_oneof![reserve, settle].boxed()
    }
}

/// The rules, written as plainly as possible, to hold both implementations to.
#[derive(Default)]
struct Model {
    now: u64,
    /// (run, estimate, granted at, settled)
    holds: Vec<(usize, u64, u64, bool)>,
    day_spent: u64,
    run_spent: [u64; 3],
    /// What settles added beyond the estimates they released: the only way past a cap.
    overrun: u64,
}

impl Model {
    fn live(&self, h: &(usize, u64, u64, bool)) -> bool {
        !h.3 && self.now < h.2 + PROP_HOLD_MS
    }

    fn day_reserved(&self) -> u64 {
        self.holds
            .iter()
            .filter(|h| self.live(h))
            .map(|h| h.1)
            .sum()
    }

    fn run_total(&self, run: usize) -> u64 {
        self.run_spent[run]
            + self
                .holds
                .iter()
                .filter(|h| h.0 == run && self.live(h))
                .map(|h| h.1)
                .sum::<u64>()
    }

    fn reserve(&mut self, run: usize, estimate: u64, run_capped: bool) -> Option<Cap> {
        if run_capped && self.run_total(run) + estimate > PROP_RUN_CAP {
            return Some(Cap::Run);
        }
        if self.day_spent + self.day_reserved() + estimate > PROP_TENANT_CAP {
            return Some(Cap::Tenant);
        }
        self.holds.push((run, estimate, self.now, false));
        None
    }

    fn settle(&mut self, index: usize, actual: u64) {
        let h = self.holds[index];
        if h.3 {
            return;
        }
        let released = if self.live(&h) { h.1 } else { 0 };
        self.overrun += actual.saturating_sub(released);
        self.holds[index].3 = true;
        self.day_spent += actual;
        self.run_spent[h.0] += actual;
    }
}

/// Runs `ops` on `ledger` and on the model: every verdict and every day's usage must agree,
/// a grant never takes the day past its cap, and the day never passes the cap by more than
/// what settles added beyond their estimates.
async fn check(
    ledger: &dyn Ledger,
    clock: Option<&ManualClock>,
    ops: &[Op],
) -> Result<(), TestCaseError> {
    let day = day_end();
    let tenant = id("acme");
    let runs = [id("run_0"), id("run_1"), id("run_2")];
    let mut model = Model::default();
    let mut granted: Vec<(usize, Reservation)> = Vec::new();
    for op in ops {
        match *op {
            Op::Reserve {
                run,
                estimate,
                run_capped,
            } => {
                let caps = Caps {
                    tenant: Some(Usd::from_nanos(PROP_TENANT_CAP).unwrap()),
                    run: run_capped.then(|| Usd::from_nanos(PROP_RUN_CAP).unwrap()),
                };
                let est = Usd::from_nanos(estimate).unwrap();
                let got = ledger
                    .reserve(&tenant, &runs[run], day, est, caps)
                    .await
                    .unwrap();
                let want = model.reserve(run, estimate, run_capped);
                match (got, want) {
                    (Reserve::Granted(r), None) => {
                        granted.push((model.holds.len() - 1, r));
                        let u = ledger.usage(&tenant, day).await.unwrap();
                        prop_assert!(
                            u.spent.nanos() + u.reserved.nanos() <= PROP_TENANT_CAP + model.overrun
                        );
                    }
                    (Reserve::Refused { which }, Some(cap)) => prop_assert_eq!(which, cap),
                    (got, want) => {
                        return Err(TestCaseError::fail(format!(
                            "{op:?}: got {got:?}, the rules say {want:?}"
                        )));
                    }
                }
            }
            Op::Settle { which, actual } => {
                if granted.is_empty() {
                    continue;
                }
                let (index, r) = &granted[which % granted.len()];
                ledger
                    .settle(r, Usd::from_nanos(actual).unwrap())
                    .await
                    .unwrap();
                model.settle(*index, actual);
            }
            Op::Pass { steps } => {
                if let Some(clock) = clock {
                    clock.advance(steps * PROP_STEP_MS);
                    model.now += steps * PROP_STEP_MS;
                }
            }
        }
        let u = ledger.usage(&tenant, day).await.unwrap();
        prop_assert_eq!(
            (u.spent.nanos(), u.reserved.nanos()),
            (model.day_spent, model.day_reserved()),
            "after {:?}",
            op
        );
        prop_assert!(model.day_spent + model.day_reserved() <= PROP_TENANT_CAP + model.overrun);
    }
    Ok(())
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn run_cases(
    cases: u32,
    strategy: BoxedStrategy<Vec<Op>>,
    test: impl Fn(Vec<Op>) -> Result<(), TestCaseError>,
) {
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    if let Err(e) = runner.run(&strategy, test) {
        panic!("{e}");
    }
}

/// Any sequence of reservations, settles and lapses on the in-process ledger follows the rules.
#[test]
fn the_in_process_ledger_follows_the_rules_for_any_sequence() {
    let rt = runtime();
    run_cases(
        256,
        proptest::collection::vec(op(true), 1..60).boxed(),
        |ops| {
            let clock = Arc::new(ManualClock::new());
            let ledger = MemoryLedger::new(clock.clone()).with_hold_ms(PROP_HOLD_MS);
            rt.block_on(check(&ledger, Some(&clock), &ops))
        },
    );
}

/// The same for the Redis ledger (on Redis time, which a test does not move: no lapses).
#[test]
fn the_redis_ledger_follows_the_rules_for_any_sequence() {
    let rt = runtime();
    let Some(conn) = rt.block_on(support::skip::redis()) else {
        return;
    };
    run_cases(
        48,
        proptest::collection::vec(op(false), 1..40).boxed(),
        |ops| {
            let ledger = RedisLedger::new(conn.clone(), support::unique_ns("spend-prop"));
            rt.block_on(check(&ledger, None, &ops))
        },
    );
}
