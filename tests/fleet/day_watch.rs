//! A spent day and the quota endpoint (docs/design.md §3.2): a day refusal rests the pool until
//! the day clock's midnight, no chat call probes the closed day, and one replica reads
//! OpenRouter's `GET /key` every period while the rest lasts, lifting it once the key shows
//! requests left (credits bought). The engine calls the simulator over real HTTP; the fleet is
//! in process (moved in time by its clock) or in Redis (where the turns are shared).

use crate::support;

use freeway::catalog::Catalog;
use freeway::classify::{RestLength, RestScope};
use freeway::clock::Clock;
use freeway::engine::{Outcome, WhenResting};
use freeway::fleet::Fleet;
use freeway::job::{RunJob, RunRequest};
use freeway::provider::{ApiKey, EnvTargets, HttpProvider, Timeouts};
use freeway::quota::{DayWatch, Lifted};
use freeway::rest::Rests;
use freeway::route::{OPENROUTER_FREE_POOL, RouteSpec};
use freeway::run::RunStatus;
use std::sync::Arc;
use std::time::Duration;

const FREE: &str = "meta-llama/llama-3.3-70b-instruct:free";

fn request(user: &str) -> RunRequest {
    RunRequest {
        // Past any UTC midnight: a spent day delays the run instead of refusing it.
        deadline_s: Some(freeway::job::MAX_DEADLINE_S),
        ..RunRequest::new(
            user,
            "hi",
            vec![RouteSpec::parse_cli(FREE, &Catalog::builtin())],
        )
    }
}

/// The watch of one replica; a harness's watch reads the harness's clock, as its engine does.
fn watch(sim: &sim::SimHandle, fleet: Fleet) -> DayWatch {
    let keys = EnvTargets::openrouter(&sim.base_url(), Some(ApiKey::new(support::PLATFORM_KEY)));
    DayWatch::new(
        Arc::new(Catalog::builtin()),
        Arc::new(keys),
        HttpProvider::new(Timeouts::default()).unwrap(),
        fleet,
    )
}

fn chat_calls(sim: &sim::SimHandle) -> usize {
    sim.calls().len()
}

fn key_reads(sim: &sim::SimHandle) -> u64 {
    sim.key_reads()
}

/// Buy credits: the day's free requests go from `rpd` to 1,000.
fn top_up(sim: &sim::SimHandle) {
    let patch = sim::ConfigPatch {
        high_balance: Some(true),
        ..Default::default()
    };
    sim.patch_config(&patch).unwrap();
}

/// Milliseconds from `now_ms` to the next UTC midnight.
fn to_utc_midnight(now_ms: u64) -> u64 {
    freeway::day::next_midnight_ms(chrono_tz::UTC, now_ms) - now_ms
}

/// A simulator allowing `rpd` free calls a day, an engine on it and the fleet's watch, with the
/// clock kept clear of midnight (the watch reads only rests longer than the pool cap).
struct Day {
    sim: sim::SimHandle,
    h: support::Harness,
    watch: DayWatch,
}

impl Day {
    async fn start(rpd: u32) -> Day {
        let config = sim::SimConfig {
            rpd,
            ..Default::default()
        };
        let sim = sim::start(config, "127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let provider = Arc::new(HttpProvider::new(Timeouts::default()).unwrap());
        let h = support::harness(provider, &sim.base_url());
        let watch = watch(&sim, h.fleet()).with_clock(h.clock.clone());
        if to_utc_midnight(h.clock.now_ms()) < 30 * 60_000 {
            h.clock.advance(Duration::from_secs(3600));
        }
        Day { sim, h, watch }
    }
}

/// Execute `job` as a worker would (a run that must wait snoozes).
async fn execute(h: &support::Harness, job: RunJob) -> Outcome {
    let routes = job.check(&Catalog::builtin()).unwrap();
    h.engine
        .execute(&job, &routes, WhenResting::Snooze)
        .await
        .unwrap()
}

#[tokio::test]
async fn a_spent_day_rests_until_midnight_and_a_top_up_the_key_endpoint_shows_lifts_it() {
    let Day { sim, h, watch } = Day::start(1).await;
    let run = |job: RunJob| execute(&h, job);

    let first = RunJob::new(request("u1"), h.clock.now_ms());
    assert!(matches!(run(first).await, Outcome::Finished { .. }));
    let second = RunJob::new(request("u2"), h.clock.now_ms());
    let outcome = run(second.clone()).await;
    let Outcome::Snoozed { until_ms, .. } = outcome else {
        panic!("a spent day delays the run, got {outcome:?}")
    };
    let now = h.clock.now_ms();
    let midnight = now + to_utc_midnight(now);
    let jitter = freeway::engine::SNOOZE_JITTER_MS.1;
    // The rest's end is read back as Redis's TTL added to this process's clock: the two clocks
    // are sampled a few milliseconds apart.
    const CLOCK_SKEW_MS: u64 = 50;
    assert!(
        (midnight..=midnight + jitter + CLOCK_SKEW_MS).contains(&until_ms),
        "delayed until UTC midnight ({midnight}), got {until_ms}"
    );
    let pool = RestScope::Pool(OPENROUTER_FREE_POOL.into());
    let remaining = h
        .rests
        .remaining(&pool)
        .await
        .unwrap()
        .expect("the pool rests");
    assert!(
        remaining.abs_diff(to_utc_midnight(now)) < 2_000,
        "{remaining} ms"
    );
    assert_eq!(chat_calls(&sim), 2);

    // The first read syncs the limiter but lifts nothing: the endpoint's `used` lags the
    // refusal, so a day rest is lifted by a later read at the earliest.
    assert_eq!(watch.round().await.unwrap(), vec![]);
    assert_eq!(key_reads(&sim), 1);
    assert_eq!(watch.round().await.unwrap(), vec![], "one read a period");
    assert_eq!(key_reads(&sim), 1);
    h.clock.advance(DayWatch::EVERY);
    assert_eq!(
        watch.round().await.unwrap(),
        vec![],
        "the day is still spent"
    );
    assert_eq!(key_reads(&sim), 2);
    assert!(h.rests.remaining(&pool).await.unwrap().is_some());

    top_up(&sim);
    h.clock.advance(DayWatch::EVERY);
    let lifted = watch.round().await.unwrap();
    assert_eq!(
        lifted,
        vec![Lifted {
            pool: OPENROUTER_FREE_POOL.into(),
            // 1,000 a day, two used (the refusal counts).
            remaining: 998,
        }]
    );
    assert_eq!(h.rests.remaining(&pool).await.unwrap(), None);
    assert_eq!(chat_calls(&sim), 2, "no chat call probed the closed day");

    let outcome = run(second.clone()).await;
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
    assert_eq!(chat_calls(&sim), 3);
}

#[tokio::test]
async fn rests_that_are_no_spent_day_are_never_lifted() {
    let sim = sim::start(sim::SimConfig::default(), "127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let h = support::harness(
        Arc::new(HttpProvider::new(Timeouts::default()).unwrap()),
        &sim.base_url(),
    );
    let watch = watch(&sim, h.fleet()).with_clock(h.clock.clone());
    let far = h.clock.now_ms() + 3_600_000;
    // A pool rest within the pool cap (a minute's window), a dead route's hour, a connection's
    // circuit, and a day rest on a pool the configuration does not know: the endpoint shows
    // requests left, and none of them is lifted for it.
    let rests = &h.rests;
    let kept = [
        (
            RestScope::Pool(OPENROUTER_FREE_POOL.into()),
            RestLength::For(60_000),
        ),
        (
            RestScope::Route {
                pool: None,
                route_key: "platform:openrouter/x/gone".into(),
            },
            RestLength::Long(far),
        ),
        (
            RestScope::Connection("platform:openrouter".into()),
            RestLength::For(3_600_000),
        ),
        (
            RestScope::Pool("somebody-else".into()),
            RestLength::Long(far),
        ),
    ];
    for (scope, length) in &kept {
        rests.write(scope, *length, "kept").await.unwrap();
    }
    for _ in 0..3 {
        assert_eq!(watch.round().await.unwrap(), vec![]);
        h.clock.advance(Duration::from_secs(15));
    }
    assert!(key_reads(&sim) >= 1, "the endpoint was read");
    for (scope, _) in &kept {
        assert!(rests.remaining(scope).await.unwrap().is_some(), "{scope:?}");
    }
}

/// An operator's pause of the pool lasts as long as a spent day, but the watch leaves it be: the
/// endpoint showing requests left is no resume. (The watch took the pause for a spent day and
/// lifted it on its second look, a few seconds after the operator paused: the board's browser
/// test saw the pause on the page and then no pool rest in `GET /v1/rests`.)
#[tokio::test]
async fn an_operators_pause_of_the_pool_is_never_lifted_by_the_watch() {
    let sim = sim::start(sim::SimConfig::default(), "127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let h = support::harness(
        Arc::new(HttpProvider::new(Timeouts::default()).unwrap()),
        &sim.base_url(),
    );
    let watch = watch(&sim, h.fleet()).with_clock(h.clock.clone());
    let pool = RestScope::Pool(OPENROUTER_FREE_POOL.into());
    let pause = freeway::rest::ActiveRest::pause_reason("provider maintenance");
    let far = h.clock.now_ms() + 25 * 3_600_000;
    h.rests
        .write(&pool, RestLength::Long(far), &pause)
        .await
        .unwrap();
    // Three of the watch's periods: it has seen the long rest before, and it reads the endpoint.
    for _ in 0..3 {
        assert_eq!(watch.round().await.unwrap(), vec![]);
        h.clock.advance(watch.period() + Duration::from_secs(1));
    }
    assert!(key_reads(&sim) >= 2, "the endpoint was read");
    let listed = h.rests.list().await.unwrap();
    assert!(
        listed.iter().any(|r| r.scope == "pool" && r.paused),
        "the pause holds: {listed:?}"
    );
}

#[tokio::test]
async fn the_limiter_learns_the_day_from_the_endpoint_and_closes_it_without_a_refusal() {
    let Day { sim, h, watch } = Day::start(3).await;
    let run = |job: RunJob| execute(&h, job);
    // The pool declares no day limit; the endpoint says 3.
    assert_eq!(watch.round().await.unwrap(), vec![]);
    for n in 0..3 {
        let job = RunJob::new(request(&format!("u{n}")), h.clock.now_ms());
        assert!(matches!(run(job).await, Outcome::Finished { .. }));
    }
    let fourth = RunJob::new(request("u4"), h.clock.now_ms());
    let outcome = run(fourth.clone()).await;
    let Outcome::Snoozed { until_ms, slot, .. } = outcome else {
        panic!("the spent day delays the run, got {outcome:?}")
    };
    let now = h.clock.now_ms();
    assert!(until_ms >= now + to_utc_midnight(now), "until midnight");
    assert_eq!(slot, None, "no slot today");
    let statuses: Vec<u16> = sim.calls().iter().map(|c| c.status).collect();
    assert_eq!(
        statuses,
        [200, 200, 200],
        "the day closed without a refusal"
    );

    top_up(&sim);
    h.clock.advance(DayWatch::EVERY);
    let lifted = watch.round().await.unwrap();
    assert_eq!(
        lifted.len(),
        1,
        "the bought day reopens the pool: {lifted:?}"
    );
    let outcome = run(fourth).await;
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
}

#[tokio::test]
async fn replicas_sharing_redis_read_the_endpoint_once_a_period() {
    let sim = sim::start(
        sim::SimConfig {
            rpd: 0,
            ..Default::default()
        },
        "127.0.0.1:0".parse().unwrap(),
    )
    .await
    .unwrap();
    let Some(conn) = support::skip::redis().await else {
        return;
    };
    let ns = support::unique_ns("day-watch");
    let fleet = Fleet::redis(&conn, &ns);
    let replicas: Vec<DayWatch> = (0..3).map(|_| watch(&sim, fleet.clone())).collect();
    let later = freeway::clock::epoch_ms() + 2 * 3_600_000;
    fleet
        .rests
        .write(
            &RestScope::Pool(OPENROUTER_FREE_POOL.into()),
            RestLength::Long(later),
            "account on the free pool (day)",
        )
        .await
        .unwrap();
    let everyone = || futures_util::future::join_all(replicas.iter().map(|w| w.round()));

    for lifted in everyone().await {
        assert_eq!(lifted.unwrap(), vec![]);
    }
    assert_eq!(key_reads(&sim), 1, "of three replicas, one reads");
    let turn = format!("{ns}:turn:quota:{OPENROUTER_FREE_POOL}");
    let mut c = conn.clone();
    let pttl: i64 = redis::cmd("PTTL")
        .arg(&turn)
        .query_async(&mut c)
        .await
        .unwrap();
    let period = DayWatch::EVERY.as_millis() as i64;
    assert!(
        pttl > period - 5_000 && pttl <= period,
        "the turn lasts a period: {pttl} ms"
    );

    // The period lapses: of three replicas, one reads again.
    let _: () = redis::cmd("DEL")
        .arg(&turn)
        .query_async(&mut c)
        .await
        .unwrap();
    for lifted in everyone().await {
        assert_eq!(lifted.unwrap(), vec![], "rpd 0: nothing left");
    }
    assert_eq!(key_reads(&sim), 2);
    for lifted in everyone().await {
        assert_eq!(lifted.unwrap(), vec![]);
    }
    assert_eq!(key_reads(&sim), 2, "the period has not lapsed");

    top_up(&sim);
    let _: () = redis::cmd("DEL")
        .arg(&turn)
        .query_async(&mut c)
        .await
        .unwrap();
    let lifted: Vec<Lifted> = everyone()
        .await
        .into_iter()
        .flat_map(|l| l.unwrap())
        .collect();
    assert_eq!(lifted.len(), 1, "{lifted:?}");
    assert_eq!(key_reads(&sim), 3);
    assert!(fleet.rests.list().await.unwrap().is_empty());
}
