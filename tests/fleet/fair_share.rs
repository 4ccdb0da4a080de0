//! Fair share of a pool's slots between tenants (docs/design.md §4.7), as one suite on both
//! limiters, and a property test of the order the in-process one hands slots out in.
//!
//! Windows are an hour long so a test never crosses one: a full window is given room by giving
//! its slots back ([`Pacer::release`]), which is what a run that goes elsewhere does.

use crate::support;

use freeway::clock::InstantClock;
use freeway::pace::{Joined, Lane, Limits, MemoryPacer, Pacer, RedisPacer, Slot, Waiter};
use proptest::prelude::*;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

const POOL: &str = "openrouter-free";
const HOUR: u64 = 3_600_000;

fn fixed(per_window: u32) -> Limits {
    Limits {
        per_window: Some(per_window),
        window_ms: HOUR,
        rolling: false,
        per_day: None,
        tokens_per_window: None,
        tokens_per_day: None,
        pin: false,
    }
}

fn day_end() -> u64 {
    freeway::clock::epoch_ms() + 30 * HOUR
}

struct Fixture {
    pace: Arc<dyn Pacer>,
}

impl Fixture {
    fn memory() -> Fixture {
        Fixture {
            pace: Arc::new(MemoryPacer::new(Arc::new(InstantClock::default()))),
        }
    }

    /// The Redis implementation, or `None` (said) without a Redis to test it on.
    async fn redis() -> Option<Fixture> {
        let conn = support::skip::redis().await?;
        Some(Fixture {
            pace: Arc::new(RedisPacer::new(conn, support::unique_ns("fair"))),
        })
    }

    /// Fill the window: every slot left taken by calls that asked as nobody.
    async fn fill(&self, limits: &Limits) {
        let n = limits.per_window.unwrap_or(0);
        for _ in 0..n {
            if self.pace.admit(POOL, limits, day_end(), 0).await.unwrap() != Slot::Now {
                return;
            }
        }
    }

    /// Give `n` of the window's slots back.
    async fn free(&self, limits: &Limits, n: u32) {
        for _ in 0..n {
            self.pace
                .release(POOL, limits, day_end(), 0, 0)
                .await
                .unwrap();
        }
    }

    async fn join(&self, limits: &Limits, run: &Run) -> Joined {
        self.pace
            .join(POOL, limits, day_end(), 0, &run.waiter())
            .await
            .unwrap()
    }

    async fn dispatch(&self, limits: &Limits) -> Vec<String> {
        let dispatched = self
            .pace
            .dispatch(POOL, limits, day_end(), 1_000)
            .await
            .unwrap();
        dispatched.granted
    }
}

/// A run as the tests make them: `{tenant}-{n}` (n zero-padded, so ids sort as they are made).
struct Run {
    id: String,
    tenant: String,
    weight: u32,
    lane: Lane,
}

impl Run {
    fn new(tenant: &str, n: usize, weight: u32) -> Run {
        Run {
            id: format!("{tenant}-{n:04}"),
            tenant: tenant.to_string(),
            weight,
            lane: Lane::Interactive,
        }
    }

    fn batch(mut self) -> Run {
        self.lane = Lane::Batch;
        self
    }

    fn waiter(&self) -> Waiter<'_> {
        Waiter {
            run_id: &self.id,
            tenant: &self.tenant,
            weight: self.weight,
            lane: self.lane,
            deadline_ms: freeway::clock::epoch_ms() + 1_000 * HOUR,
        }
    }
}

fn tenant_of(run: &str) -> &str {
    run.rsplit_once('-').map_or(run, |(t, _)| t)
}

fn count_by_tenant(runs: &[String]) -> HashMap<String, usize> {
    let mut counts = HashMap::new();
    for run in runs {
        *counts.entry(tenant_of(run).to_string()).or_default() += 1;
    }
    counts
}

async fn slots_go_to_waiting_tenants_by_weight_each_in_its_order(f: Fixture) {
    let limits = fixed(10);
    f.fill(&limits).await;
    let a: Vec<Run> = (0..20).map(|n| Run::new("a", n, 1)).collect();
    let b: Vec<Run> = (0..20).map(|n| Run::new("b", n, 4)).collect();
    for run in a.iter().chain(&b) {
        assert!(
            matches!(f.join(&limits, run).await, Joined::Queued { .. }),
            "a full window grants nothing"
        );
    }
    f.free(&limits, 10).await;
    let granted = f.dispatch(&limits).await;
    let counts = count_by_tenant(&granted);
    assert_eq!(granted.len(), 10, "{granted:?}");
    assert_eq!(
        (counts["a"], counts["b"]),
        (2, 8),
        "weights 1:4 share 10 slots 2:8: {granted:?}"
    );
    let of = |t: &str| -> Vec<&String> { granted.iter().filter(|r| tenant_of(r) == t).collect() };
    assert_eq!(
        of("a"),
        vec!["a-0000", "a-0001"],
        "a tenant's runs keep their order"
    );
    assert_eq!(of("b")[..2], ["b-0000", "b-0001"]);
    let usage = f.pace.usage(POOL, &limits, day_end()).await.unwrap();
    assert_eq!((usage.waiting, usage.tenants_waiting), (30, 2));
    let shares: Vec<(String, u32)> = usage
        .shares
        .iter()
        .map(|s| (s.tenant.clone(), s.slots))
        .collect();
    assert_eq!(shares, vec![("a".into(), 2), ("b".into(), 8)]);
    assert_eq!(usage.window_used, 10, "granted slots are counted");
    // A granted run finds its pool open and takes its slot, once.
    let first = a[0].waiter();
    let peeked = f
        .pace
        .peek_as(POOL, &limits, day_end(), 0, Some(&first))
        .await;
    assert_eq!(peeked.unwrap(), Slot::Now);
    let admitted = f
        .pace
        .admit_as(POOL, &limits, day_end(), 0, Some(&first))
        .await;
    assert_eq!(admitted.unwrap(), Slot::Now);
    let again = f
        .pace
        .admit_as(POOL, &limits, day_end(), 0, Some(&first))
        .await;
    assert!(matches!(again.unwrap(), Slot::In(_)), "its slot was used");
    let usage = f.pace.usage(POOL, &limits, day_end()).await.unwrap();
    assert_eq!(usage.window_used, 10, "a granted slot is not counted twice");
}

async fn while_runs_wait_only_their_turn_or_a_continuation_takes_a_slot(f: Fixture) {
    let limits = fixed(3);
    f.fill(&limits).await;
    let waiting = Run::new("a", 0, 1);
    assert!(matches!(
        f.join(&limits, &waiting).await,
        Joined::Queued { .. }
    ));
    f.free(&limits, 2).await;
    let newcomer = Run::new("c", 0, 1);
    let slot = f
        .pace
        .admit_as(POOL, &limits, day_end(), 0, Some(&newcomer.waiter()))
        .await
        .unwrap();
    assert!(
        matches!(slot, Slot::In(_)),
        "room, but a run waits: {slot:?}"
    );
    let peeked = f
        .pace
        .peek_as(POOL, &limits, day_end(), 0, Some(&newcomer.waiter()))
        .await
        .unwrap();
    assert!(matches!(peeked, Slot::In(_)), "{peeked:?}");
    // A continuation asks as nobody: it tries once and is never paced out.
    let continuation = f.pace.admit(POOL, &limits, day_end(), 0).await.unwrap();
    assert_eq!(continuation, Slot::Now);
    assert_eq!(f.dispatch(&limits).await, vec!["a-0000".to_string()]);
    // Nobody waits now: the newcomer takes a slot as before fair share.
    f.free(&limits, 1).await;
    let slot = f
        .pace
        .admit_as(POOL, &limits, day_end(), 0, Some(&newcomer.waiter()))
        .await
        .unwrap();
    assert_eq!(slot, Slot::Now);
}

async fn a_tenant_alone_gets_every_slot_and_interactive_runs_go_first(f: Fixture) {
    let limits = fixed(4);
    // Alone and with room: the first in line is granted at once.
    let alone = Run::new("x", 0, 1);
    assert!(matches!(
        f.join(&limits, &alone).await,
        Joined::Granted { .. }
    ));
    let batch: Vec<Run> = (1..6).map(|n| Run::new("x", n, 1).batch()).collect();
    let interactive: Vec<Run> = (0..3).map(|n| Run::new("y", n, 1)).collect();
    f.fill(&limits).await;
    for run in batch.iter().chain(&interactive) {
        f.join(&limits, run).await;
    }
    f.free(&limits, 4).await;
    let granted = f.dispatch(&limits).await;
    assert_eq!(
        granted,
        vec!["y-0000", "y-0001", "y-0002", "x-0001"],
        "interactive first, then batch; nothing left unused"
    );
}

async fn a_run_that_leaves_gives_its_granted_slot_back(f: Fixture) {
    let limits = fixed(2);
    f.fill(&limits).await;
    let runs: Vec<Run> = (0..3).map(|n| Run::new("a", n, 1)).collect();
    for run in &runs {
        f.join(&limits, run).await;
    }
    f.free(&limits, 1).await;
    assert_eq!(f.dispatch(&limits).await, vec!["a-0000".to_string()]);
    f.pace
        .leave(POOL, &limits, day_end(), 0, "a-0000")
        .await
        .unwrap();
    f.pace
        .leave(POOL, &limits, day_end(), 0, "a-0001")
        .await
        .unwrap();
    assert_eq!(
        f.dispatch(&limits).await,
        vec!["a-0002".to_string()],
        "the slot a-0000 gave back goes to the next in line; a-0001 left the line"
    );
    let usage = f.pace.usage(POOL, &limits, day_end()).await.unwrap();
    assert_eq!((usage.waiting, usage.window_used), (0, 2));
}

async fn a_run_past_its_deadline_loses_its_place(f: Fixture) {
    let limits = fixed(1);
    f.fill(&limits).await;
    let late = Run::new("a", 0, 1);
    let mut waiter = late.waiter();
    waiter.deadline_ms = freeway::clock::epoch_ms().saturating_sub(1);
    f.pace
        .join(POOL, &limits, day_end(), 0, &waiter)
        .await
        .unwrap();
    f.join(&limits, &Run::new("b", 0, 1)).await;
    f.free(&limits, 1).await;
    assert_eq!(f.dispatch(&limits).await, vec!["b-0000".to_string()]);
}

on_both!(
    slots_go_to_waiting_tenants_by_weight_each_in_its_order,
    while_runs_wait_only_their_turn_or_a_continuation_takes_a_slot,
    a_tenant_alone_gets_every_slot_and_interactive_runs_go_first,
    a_run_that_leaves_gives_its_granted_slot_back,
    a_run_past_its_deadline_loses_its_place,
);

/// The Redis script and the in-process queue hand out the same slots in the same order, for
/// arrivals of many tenants with mixed weights and lanes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_and_memory_hand_out_slots_in_the_same_order() {
    let limits = fixed(7);
    for seed in [1u64, 7, 42] {
        let Some(redis) = Fixture::redis().await else {
            return;
        };
        let memory = Fixture::memory();
        let mut orders = Vec::new();
        for f in [&memory, &redis] {
            let mut rng = seed;
            let mut step = move || {
                rng = rng
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                (rng >> 33) as usize
            };
            f.fill(&limits).await;
            let mut granted = Vec::new();
            for round in 0..6 {
                for n in 0..(step() % 12) {
                    let tenant = format!("t{}", step() % 9);
                    let weight = 1 + (tenant.as_bytes()[1] - b'0') as u32 % 4;
                    let mut run = Run::new(&tenant, round * 100 + n, weight);
                    if step() % 4 == 0 {
                        run = run.batch();
                    }
                    f.join(&limits, &run).await;
                }
                f.free(&limits, 7).await;
                granted.extend(f.dispatch(&limits).await);
            }
            orders.push(granted);
        }
        assert!(!orders[0].is_empty());
        assert_eq!(orders[0], orders[1], "seed {seed}");
    }
}

/// One window's arrivals: (tenant, runs).
type Arrivals = Vec<(usize, usize)>;

fn scenario() -> impl Strategy<Value = (u32, Vec<u32>, Vec<Arrivals>)> {
    (1u32..=12, 1usize..=20).prop_flat_map(|(limit, tenants)| {
        (
            Just(limit),
            prop::collection::vec(1u32..=4, tenants),
            prop::collection::vec(
                prop::collection::vec((0..tenants, 1usize..=15), 0..4),
                10..30,
            ),
        )
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    /// For any arrivals of up to 20 tenants with weights: each window's slots all go to waiting
    /// runs while any wait (work-conserving), and over any 10 windows a tenant that waits
    /// throughout — in one wait, never leaving the line — gets within two and a half slots of its
    /// weighted share (its weight over the weights of the tenants waiting, slot by slot). Within
    /// one is what two tenants that both wait get (below); with tenants coming and going a
    /// stretch can begin with a tenant owed and end with it ahead, and searches of 30,000 random
    /// arrivals found one-wait stretches up to 1.98 off. A tenant that leaves and comes back
    /// starts a new wait: a debt it left with is not carried (it had nothing waiting to be owed
    /// for), so a stretch across its gaps has no such bound — a seed in
    /// tests/proptest-regressions/fair_share.txt is one, 2.65 off across three waits.
    #[test]
    fn slots_are_work_conserving_and_each_stretch_near_its_weighted_share(
        (limit, weights, windows) in scenario()
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        runtime.block_on(async {
            let clock = Arc::new(InstantClock::default());
            let pace = MemoryPacer::new(clock.clone());
            let limits = fixed(limit);
            let end = freeway::clock::epoch_ms() + 1000 * HOUR;
            // Each tenant's waiting runs and which of its waits this is, and per slot: who got
            // it, the weights waiting, and the wait each waiting tenant was in.
            let mut waiting = vec![0usize; weights.len()];
            let mut wait_of = vec![0usize; weights.len()];
            let mut slots: Vec<(usize, Vec<f64>, Vec<usize>)> = Vec::new();
            let mut window_of_slot = Vec::new();
            let mut made = 0;
            for (w, arrivals) in windows.iter().enumerate() {
                // The window starts full of others' calls; the arrivals join the line.
                for _ in 0..limit {
                    pace.admit(POOL, &limits, end, 0).await.unwrap();
                }
                for &(t, n) in arrivals {
                    for _ in 0..n {
                        let run = Run::new(&format!("t{t}"), made, weights[t]);
                        made += 1;
                        pace.join(POOL, &limits, end, 0, &run.waiter()).await.unwrap();
                        if waiting[t] == 0 {
                            wait_of[t] += 1;
                        }
                        waiting[t] += 1;
                    }
                }
                for _ in 0..limit {
                    pace.release(POOL, &limits, end, 0, 0).await.unwrap();
                }
                let before: usize = waiting.iter().sum();
                let granted = pace.dispatch(POOL, &limits, end, 1_000).await.unwrap().granted;
                prop_assert_eq!(granted.len(), before.min(limit as usize), "window {}", w);
                for run in granted {
                    let t: usize = tenant_of(&run)[1..].parse().unwrap();
                    let share: Vec<f64> = waiting
                        .iter()
                        .zip(&weights)
                        .map(|(&n, &wt)| if n > 0 { f64::from(wt) } else { 0.0 })
                        .collect();
                    slots.push((t, share, wait_of.clone()));
                    window_of_slot.push(w);
                    waiting[t] -= 1;
                }
                clock.advance(Duration::from_millis(HOUR));
            }
            // Over any 10 windows, a tenant that waits throughout, in one wait, gets its share
            // within 2.5.
            for first in 0..windows.len().saturating_sub(9) {
                let range: Vec<usize> = (0..slots.len())
                    .filter(|&i| (first..first + 10).contains(&window_of_slot[i]))
                    .collect();
                for t in 0..weights.len() {
                    let one_wait = range.iter().all(|&i| slots[i].2[t] == slots[range[0]].2[t]);
                    if range.is_empty() || !one_wait || range.iter().any(|&i| slots[i].1[t] == 0.0) {
                        continue;
                    }
                    let got = range.iter().filter(|&&i| slots[i].0 == t).count() as f64;
                    let fair: f64 = range
                        .iter()
                        .map(|&i| slots[i].1[t] / slots[i].1.iter().sum::<f64>())
                        .sum();
                    prop_assert!(
                        (got - fair).abs() < 2.5,
                        "tenant {} got {} of windows {}..{}, its share is {:.2}",
                        t, got, first, first + 10, fair
                    );
                }
            }
            Ok(())
        })?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Two tenants with weights 4:1 that both have runs waiting split every window's slots 4:1,
    /// give or take one, whatever the window's size and whichever came first.
    #[test]
    fn two_backlogged_tenants_weighted_four_to_one_split_each_window_four_to_one(
        limit in 1u32..=40, head_start in 0usize..30, first_heavy in any::<bool>()
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        runtime.block_on(async {
            let clock = Arc::new(InstantClock::default());
            let pace = MemoryPacer::new(clock.clone());
            let limits = fixed(limit);
            let end = freeway::clock::epoch_ms() + 1000 * HOUR;
            let (first, second) = if first_heavy { (("h", 4), ("l", 1)) } else { (("l", 1), ("h", 4)) };
            let windows = 8usize;
            let per_tenant = limit as usize * windows + head_start;
            for _ in 0..limit {
                pace.admit(POOL, &limits, end, 0).await.unwrap();
            }
            for (tenant, weight) in [first, second] {
                let extra = if tenant == first.0 { head_start } else { 0 };
                for n in 0..per_tenant + extra {
                    let run = Run::new(tenant, n, weight);
                    pace.join(POOL, &limits, end, 0, &run.waiter()).await.unwrap();
                }
            }
            for w in 0..windows {
                for _ in 0..limit {
                    pace.release(POOL, &limits, end, 0, 0).await.unwrap();
                }
                let granted = pace.dispatch(POOL, &limits, end, 1_000).await.unwrap().granted;
                let heavy = granted.iter().filter(|r| tenant_of(r) == "h").count() as f64;
                prop_assert_eq!(granted.len(), limit as usize);
                let fair = f64::from(limit) * 4.0 / 5.0;
                prop_assert!((heavy - fair).abs() <= 1.0, "window {}: {} of {} to the heavy tenant", w, heavy, limit);
                clock.advance(Duration::from_millis(HOUR));
                for _ in 0..limit {
                    pace.admit(POOL, &limits, end, 0).await.unwrap();
                }
            }
            Ok(())
        })?;
    }
}

/// A redis-server of this test's own, whose command counts no other test adds to.
struct OwnRedis(std::process::Child);

impl OwnRedis {
    async fn start() -> (OwnRedis, freeway::connect::RedisConnection) {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("a free port");
        let server = OwnRedis(
            std::process::Command::new("redis-server")
                .args([
                    "--port",
                    &port.to_string(),
                    "--bind",
                    "127.0.0.1",
                    "--save",
                    "",
                ])
                .args(["--appendonly", "no"])
                .stdout(std::process::Stdio::null())
                .spawn()
                .expect("redis-server on PATH (scripts/test.sh installs it)"),
        );
        let url = format!("redis://127.0.0.1:{port}");
        for _ in 0..100 {
            if let Ok(conn) = freeway::connect::redis(&url).await {
                return (server, conn);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("redis-server did not start on port {port}");
    }
}

impl Drop for OwnRedis {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The commands Redis ran (scripts' own included) since the counts were last reset.
async fn commands_run(conn: &mut freeway::connect::RedisConnection) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await
        .unwrap();
    info.lines()
        .filter(|l| l.starts_with("cmdstat_") && !l.starts_with("cmdstat_info"))
        .filter(|l| !l.starts_with("cmdstat_config"))
        .filter_map(|l| {
            l.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

/// docs/design.md §4.7: handing out a slot, and a waiting run's asking for one, run as many Redis
/// commands with ten tenants waiting as with ten thousand: the script walks no tenants (a loop
/// over them would show as commands; each command it runs is a hash field by name or a
/// sorted-set step, O(log n)).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admit_costs_the_same_with_ten_tenants_waiting_or_ten_thousand() {
    let (_server, mut conn) = OwnRedis::start().await;
    let mut counts = Vec::new();
    for tenants in [10usize, 10_000] {
        let pace = RedisPacer::new(conn.clone(), format!("fair-{tenants}"));
        let limits = fixed(10);
        let end = day_end();
        for _ in 0..10 {
            pace.admit(POOL, &limits, end, 0).await.unwrap();
        }
        for t in 0..tenants {
            let run = Run::new(&format!("t{t}"), t, 1 + (t % 4) as u32);
            pace.join(POOL, &limits, end, 0, &run.waiter())
                .await
                .unwrap();
        }
        pace.release(POOL, &limits, end, 0, 0).await.unwrap();
        let asker = Run::new("t7", 7, 1 + 7 % 4);
        redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .query_async::<()>(&mut conn)
            .await
            .unwrap();
        let granted = pace.dispatch(POOL, &limits, end, 1).await.unwrap().granted;
        assert_eq!(granted.len(), 1);
        let dispatched = commands_run(&mut conn).await;
        redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .query_async::<()>(&mut conn)
            .await
            .unwrap();
        let slot = pace
            .admit_as(POOL, &limits, end, 0, Some(&asker.waiter()))
            .await
            .unwrap();
        assert!(matches!(slot, Slot::In(_)), "t7 waits its turn: {slot:?}");
        let asked = commands_run(&mut conn).await;
        counts.push((tenants, dispatched, asked));
    }
    assert_eq!(
        (counts[0].1, counts[0].2),
        (counts[1].1, counts[1].2),
        "commands for one slot handed out, and for one waiting run's ask: {counts:?}"
    );
}

/// Ten replicas joining and handing out at once: every slot of the window goes to one run, once,
/// and the window counts no more than its limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ten_replicas_at_once_hand_each_slot_to_one_run() {
    let Some(conn) = support::skip::redis().await else {
        return;
    };
    let ns = support::unique_ns("fair-ten");
    let limits = fixed(20);
    let replicas: Vec<Arc<RedisPacer>> = (0..10)
        .map(|_| Arc::new(RedisPacer::new(conn.clone(), ns.clone())))
        .collect();
    for _ in 0..20 {
        replicas[0]
            .admit(POOL, &limits, day_end(), 0)
            .await
            .unwrap();
    }
    let joins = replicas.iter().enumerate().map(|(r, pace)| {
        let pace = pace.clone();
        tokio::spawn(async move {
            for n in 0..20 {
                let run = Run::new(&format!("t{}", (r * 20 + n) % 7), r * 20 + n, 1);
                pace.join(POOL, &limits, day_end(), 0, &run.waiter())
                    .await
                    .unwrap();
            }
        })
    });
    for join in joins.collect::<Vec<_>>() {
        join.await.unwrap();
    }
    for _ in 0..20 {
        replicas[0]
            .release(POOL, &limits, day_end(), 0, 0)
            .await
            .unwrap();
    }
    let rounds = replicas.iter().map(|pace| {
        let pace = pace.clone();
        tokio::spawn(async move {
            let mut granted = Vec::new();
            for _ in 0..5 {
                granted.extend(
                    pace.dispatch(POOL, &limits, day_end(), 8)
                        .await
                        .unwrap()
                        .granted,
                );
            }
            granted
        })
    });
    let mut granted = Vec::new();
    for round in rounds.collect::<Vec<_>>() {
        granted.extend(round.await.unwrap());
    }
    let distinct: std::collections::HashSet<&String> = granted.iter().collect();
    assert_eq!(granted.len(), 20, "{granted:?}");
    assert_eq!(distinct.len(), 20, "each run told once");
    let usage = replicas[3].usage(POOL, &limits, day_end()).await.unwrap();
    assert_eq!((usage.window_used, usage.waiting), (20, 180));
}
