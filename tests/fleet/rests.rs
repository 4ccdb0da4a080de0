//! The rules of the fleet's rests and the runs' leases, as one suite run on both implementations:
//! the Redis one (`REDIS_URL`, default `redis://127.0.0.1:6379`; each test in its own namespace,
//! so tests share one server) and the in-process one the engine's tests use. Checks that need
//! Redis itself (its clock, its index, the events stream) or the in-process clock come after.

use crate::support;

use freeway::catalog::Catalog;
use freeway::classify::{
    EVIDENCE_POOL_REST_MS, EVIDENCE_WINDOW_MS, RestLength, RestScope, classify_response,
};
use freeway::clock::{Clock, InstantClock};
use freeway::connect::RedisConnection;
use freeway::headers::Headers;
use freeway::lease::{LEASE_TTL, Lease, Leases, MemoryLeases, RedisLeases};
use freeway::rest::{
    ActiveRest, MemoryRests, Probe, RedisRests, RestKind, Rests, UNNAMED_RESTS,
    UNNAMED_RESTS_PER_USER,
};
use freeway::route::Route;
use std::sync::Arc;
use std::time::Duration;

const POOL: &str = "openrouter-free";
const LLAMA_FREE: &str = "meta-llama/llama-3.3-70b-instruct:free";

/// The implementation under test, and what only it can show.
struct Fixture {
    rests: Arc<dyn Rests>,
    leases: Arc<dyn Leases>,
    backend: Backend,
}

enum Backend {
    Memory {
        rests: Arc<MemoryRests>,
        clock: Arc<InstantClock>,
    },
    Redis {
        rests: RedisRests,
        leases: RedisLeases,
        conn: RedisConnection,
    },
}

impl Fixture {
    fn memory() -> Fixture {
        Fixture::memory_on(InstantClock::default())
    }

    fn memory_on(clock: InstantClock) -> Fixture {
        let clock = Arc::new(clock);
        let rests = Arc::new(MemoryRests::new(clock.clone()));
        Fixture {
            rests: rests.clone(),
            leases: Arc::new(MemoryLeases::new(clock.clone())),
            backend: Backend::Memory { rests, clock },
        }
    }

    /// The Redis implementation, or `None` (said) without a Redis to test it on.
    async fn redis() -> Option<Fixture> {
        let conn = support::skip::redis().await?;
        let ns = support::unique_ns("rests");
        let rests = RedisRests::new(conn.clone(), ns.clone());
        let leases = RedisLeases::new(conn.clone(), ns);
        Some(Fixture {
            rests: Arc::new(rests.clone()),
            leases: Arc::new(leases.clone()),
            backend: Backend::Redis {
                rests,
                leases,
                conn,
            },
        })
    }

    /// Now on the clock the rests are timed by.
    async fn now_ms(&self) -> u64 {
        match &self.backend {
            Backend::Memory { clock, .. } => clock.now_ms(),
            Backend::Redis { conn, .. } => redis_now_ms(conn).await,
        }
    }

    /// The remaining ms of `scope`'s rest, -2 when it does not rest (as Redis `PTTL` says).
    async fn remaining(&self, scope: &RestScope) -> i64 {
        let remaining = self.rests.remaining(scope).await.expect("remaining");
        remaining.map_or(-2, |ms| ms as i64)
    }

    /// Whether any evidence against the pool is kept.
    async fn has_evidence(&self) -> bool {
        match &self.backend {
            Backend::Memory { rests, .. } => rests.evidence(POOL) > 0,
            Backend::Redis { rests, conn, .. } => pttl(conn, &rests.evidence_key(POOL)).await != -2,
        }
    }

    /// The Redis implementation and its connection, for the checks that only it can answer.
    fn in_redis(&self) -> (&RedisRests, &RedisConnection) {
        match &self.backend {
            Backend::Redis { rests, conn, .. } => (rests, conn),
            Backend::Memory { .. } => panic!("a check of the Redis implementation"),
        }
    }

    /// An evidence entry written `age_ms` ago by Redis time.
    async fn old_evidence(&self, user: &str, unique: &str, age_ms: u64) {
        let (rests, conn) = self.in_redis();
        let now = redis_now_ms(conn).await;
        let mut conn = conn.clone();
        let _: i64 = redis::cmd("ZADD")
            .arg(rests.evidence_key(POOL))
            .arg(now - age_ms)
            .arg(format!("{user}:{unique}"))
            .query_async(&mut conn)
            .await
            .expect("ZADD");
    }

    /// Let the rest of `scope` end, as its TTL would.
    async fn end_rest(&self, scope: &RestScope) {
        match &self.backend {
            Backend::Memory { clock, .. } => {
                let left = self.rests.remaining(scope).await.expect("remaining");
                clock.advance(Duration::from_millis(left.unwrap_or(0) + 1));
            }
            Backend::Redis { rests, conn, .. } => {
                let mut conn = conn.clone();
                let key = rests.key_for(scope).expect("a rest key");
                let _: () = redis::cmd("DEL")
                    .arg(key)
                    .query_async(&mut conn)
                    .await
                    .expect("DEL");
            }
        }
    }

    /// Let `ms` pass on the clock the leases are timed by (Redis's own: real time).
    async fn pass(&self, ms: u64) {
        match &self.backend {
            Backend::Memory { clock, .. } => clock.advance(Duration::from_millis(ms)),
            Backend::Redis { .. } => tokio::time::sleep(Duration::from_millis(ms)).await,
        }
    }

    /// Let a run's lease get within a second of expiring.
    async fn age_lease(&self, run_id: &str) {
        match &self.backend {
            Backend::Memory { clock, .. } => clock.advance(LEASE_TTL - Duration::from_secs(1)),
            Backend::Redis { leases, conn, .. } => {
                let mut conn = conn.clone();
                let _: () = redis::cmd("PEXPIRE")
                    .arg(leases.key(run_id))
                    .arg(1_000)
                    .query_async(&mut conn)
                    .await
                    .expect("PEXPIRE");
            }
        }
    }
}

async fn redis_now_ms(conn: &RedisConnection) -> u64 {
    let mut conn = conn.clone();
    let (s, us): (u64, u64) = redis::cmd("TIME")
        .query_async(&mut conn)
        .await
        .expect("TIME");
    s * 1000 + us / 1000
}

async fn pttl(conn: &RedisConnection, key: &str) -> i64 {
    let mut conn = conn.clone();
    redis::cmd("PTTL")
        .arg(key)
        .query_async(&mut conn)
        .await
        .expect("PTTL")
}

async fn a_guessed_rest_that_ends_is_probed_by_one_call_before_the_others(f: Fixture) {
    let free = route(LLAMA_FREE);
    f.rests
        .write(&pool(), RestLength::Guess(60_000), "ambiguous")
        .await
        .expect("write");
    assert_eq!(
        f.rests.claim_probes(&free, "a").await.expect("claim"),
        Probe::NotDue,
        "the rest still holds"
    );
    f.end_rest(&pool()).await;
    assert_eq!(
        f.rests.claim_probes(&free, "a").await.expect("claim"),
        Probe::Claimed
    );
    let held = f.rests.claim_probes(&free, "b").await.expect("claim");
    let Probe::Held(closure) = held else {
        panic!("a second caller waits for the probe: {held:?}")
    };
    assert!(
        closure.remaining_ms <= 2_000,
        "it looks again soon: {closure:?}"
    );
    let seen = f
        .rests
        .closures(std::slice::from_ref(&free))
        .await
        .expect("closures");
    assert!(
        seen[0]
            .as_ref()
            .is_some_and(|c| c.reason.starts_with("probing")),
        "{seen:?}"
    );

    // The probe succeeds: every caller may call.
    f.rests
        .probes_answered(&free, "a", true)
        .await
        .expect("answer");
    assert_eq!(
        f.rests.claim_probes(&free, "b").await.expect("claim"),
        Probe::NotDue
    );
    let seen = f
        .rests
        .closures(std::slice::from_ref(&free))
        .await
        .expect("closures");
    assert_eq!(seen, vec![None]);
}

async fn a_failed_probe_hands_the_next_probe_to_another_call(f: Fixture) {
    let free = route(LLAMA_FREE);
    let circuit = RestScope::Connection(free.connection_scope());
    f.rests
        .write(&circuit, RestLength::Guess(3_600_000), "auth")
        .await
        .expect("write");
    f.end_rest(&circuit).await;
    assert_eq!(
        f.rests.claim_probes(&free, "a").await.expect("claim"),
        Probe::Claimed
    );
    f.rests
        .probes_answered(&free, "a", false)
        .await
        .expect("answer");
    assert_eq!(
        f.rests.claim_probes(&free, "b").await.expect("claim"),
        Probe::Claimed
    );
    // Only the holder's answer counts.
    f.rests
        .probes_answered(&free, "a", true)
        .await
        .expect("answer");
    assert!(matches!(
        f.rests.claim_probes(&free, "c").await.expect("claim"),
        Probe::Held(_)
    ));
}

async fn a_rest_the_provider_timed_needs_no_probe(f: Fixture) {
    let free = route(LLAMA_FREE);
    let now = f.now_ms().await;
    f.rests
        .write(
            &pool(),
            RestLength::Until(now + 30_000),
            "X-RateLimit-Reset",
        )
        .await
        .expect("write");
    f.end_rest(&pool()).await;
    for owner in ["a", "b"] {
        assert_eq!(
            f.rests.claim_probes(&free, owner).await.expect("claim"),
            Probe::NotDue
        );
    }
}

// Each named test (an `async fn(Fixture)`) runs once per implementation: `in_memory::name` and
// `in_redis::name`.
on_both!(
    a_guessed_rest_that_ends_is_probed_by_one_call_before_the_others,
    a_failed_probe_hands_the_next_probe_to_another_call,
    a_rest_the_provider_timed_needs_no_probe,
    concurrent_writers_keep_the_longest,
    a_shorter_write_never_shortens,
    writes_are_capped_by_scope,
    until_is_read_on_the_rests_clock_and_the_past_rests_one_second,
    nothing_to_close_writes_nothing,
    three_failures_from_two_users_rest_the_pool,
    three_failures_from_one_user_do_not,
    two_entries_from_two_users_do_not,
    evidence_never_shortens_a_longer_pool_rest,
    user_connection_failures_never_touch_the_pool,
    closures_return_the_longest_per_route,
    list_and_clear,
    rests_of_routes_no_configuration_names_are_bounded_per_user_and_in_all,
    closures_of_an_empty_chain_make_no_call,
    a_run_lease_has_one_holder_until_it_lets_go,
    a_period_is_taken_by_one_caller_as_it_ends_and_never_at_the_first_ask,
);

fn pool() -> RestScope {
    RestScope::Pool(POOL.into())
}

fn route(s: &str) -> Route {
    Route::parse(s, &Catalog::builtin()).expect("test routes are valid")
}

fn route_scope(s: &str) -> RestScope {
    let r = route(s);
    RestScope::Route {
        pool: r.pool.clone(),
        route_key: r.key(),
    }
}

async fn concurrent_writers_keep_the_longest(f: Fixture) {
    for scope in [
        pool(),
        route_scope(LLAMA_FREE),
        RestScope::Connection("conn_7".into()),
    ] {
        let lengths: Vec<u64> = (0..50)
            .map(|_| rand::random_range(1_000u64..290_000))
            .collect();
        let longest = *lengths.iter().max().expect("50 lengths");
        let mut writers = tokio::task::JoinSet::new();
        for (i, ms) in lengths.iter().copied().enumerate() {
            let rests = f.rests.clone();
            let scope = scope.clone();
            writers.spawn(async move {
                let remaining = rests
                    .write(&scope, RestLength::For(ms), &format!("writer {i}"))
                    .await
                    .expect("write");
                (ms, remaining)
            });
        }
        while let Some(joined) = writers.join_next().await {
            let (requested, remaining) = joined.expect("writer task");
            assert!(
                remaining >= requested,
                "a write reports at least its own rest"
            );
            assert!(remaining <= longest);
        }
        let pttl = f.remaining(&scope).await;
        assert!(
            pttl as u64 <= longest && longest - (pttl as u64) < 2_000,
            "{scope:?}: {pttl} vs {longest}"
        );
    }
}

async fn a_shorter_write_never_shortens(f: Fixture) {
    let scope = route_scope(LLAMA_FREE);
    assert_eq!(
        f.rests
            .write(&scope, RestLength::For(120_000), "first")
            .await
            .expect("write"),
        120_000
    );
    let now = f.now_ms().await;
    for shorter in [
        RestLength::For(5_000),
        RestLength::Until(now + 10_000),
        RestLength::Until(1),
    ] {
        let remaining = f
            .rests
            .write(&scope, shorter, "shorter")
            .await
            .expect("write");
        assert!(
            remaining > 115_000,
            "{shorter:?} shortened the rest to {remaining}"
        );
    }
    let closure = f
        .rests
        .closures(&[route(LLAMA_FREE)])
        .await
        .expect("closures")[0]
        .clone();
    let closure = closure.expect("the route rests");
    assert_eq!(
        (closure.kind, closure.reason.as_str()),
        (RestKind::Route, "first")
    );
    assert_eq!(
        f.rests
            .write(&scope, RestLength::For(200_000), "longer")
            .await
            .expect("write"),
        200_000
    );
}

async fn writes_are_capped_by_scope(f: Fixture) {
    let ten_minutes = RestLength::For(600_000);
    assert_eq!(
        f.rests
            .write(&pool(), ten_minutes, "pool")
            .await
            .expect("write"),
        300_000
    );
    assert_eq!(
        f.rests
            .write(&route_scope(LLAMA_FREE), ten_minutes, "route")
            .await
            .expect("write"),
        300_000
    );
    assert_eq!(
        f.rests
            .write(&route_scope("openai/gpt-4o-mini"), ten_minutes, "route")
            .await
            .expect("write"),
        300_000
    );
    let two_hours = RestLength::For(7_200_000);
    let circuit = RestScope::Connection("platform:openrouter".into());
    assert_eq!(
        f.rests
            .write(&circuit, two_hours, "auth")
            .await
            .expect("write"),
        3_600_000
    );
    let far = f.now_ms().await + 86_400_000;
    assert_eq!(
        f.rests
            .write(&pool(), RestLength::Until(far), "daily")
            .await
            .expect("write"),
        300_000
    );
    assert!(f.remaining(&pool()).await <= 300_000);
}

async fn until_is_read_on_the_rests_clock_and_the_past_rests_one_second(f: Fixture) {
    let scope = route_scope("openai/gpt-4o-mini");
    assert_eq!(
        f.rests
            .write(&scope, RestLength::Until(1), "past")
            .await
            .expect("write"),
        1_000
    );
    let other = route_scope("openai/gpt-4o");
    let at = f.now_ms().await + 20_000;
    let remaining = f
        .rests
        .write(&other, RestLength::Until(at), "reset")
        .await
        .expect("write");
    assert!((19_000..=20_000).contains(&remaining), "{remaining}");
}

async fn nothing_to_close_writes_nothing(f: Fixture) {
    assert_eq!(
        f.rests
            .write(&RestScope::None, RestLength::For(60_000), "none")
            .await
            .expect("write"),
        0
    );
    assert_eq!(
        f.rests.list().await.expect("list"),
        Vec::<ActiveRest>::new()
    );
}

async fn three_failures_from_two_users_rest_the_pool(f: Fixture) {
    // User ids may contain ':'; the user is everything before the member's last ':'.
    assert_eq!(
        f.rests
            .record_evidence(POOL, "team:alice", "run1")
            .await
            .expect("evidence"),
        None
    );
    assert_eq!(
        f.rests
            .record_evidence(POOL, "team:bob", "run2")
            .await
            .expect("evidence"),
        None
    );
    assert_eq!(f.rests.remaining(&pool()).await.expect("remaining"), None);
    let rest = f
        .rests
        .record_evidence(POOL, "team:alice", "run3")
        .await
        .expect("evidence");
    let rest = rest.expect("corroborated evidence rests the pool");
    assert!((59_000..=60_000).contains(&rest), "{rest}");
    let pool_rest = f
        .rests
        .remaining(&pool())
        .await
        .expect("remaining")
        .expect("the pool rests");
    assert!(pool_rest <= 60_000 && pool_rest > 58_000);
    if let Backend::Redis { rests, conn, .. } = &f.backend {
        let evidence_ttl = pttl(conn, &rests.evidence_key(POOL)).await;
        assert!(evidence_ttl > 0 && evidence_ttl <= 60_000, "{evidence_ttl}");
    }
    let listed = f.rests.list().await.expect("list");
    assert_eq!(listed.len(), 1);
    assert_eq!(
        (listed[0].scope.as_str(), listed[0].key.as_str()),
        ("pool", POOL)
    );
    // Nobody said how long the pool is closed: its end is probed by one call.
    let free = route(LLAMA_FREE);
    assert_eq!(
        f.rests.claim_probes(&free, "a").await.expect("claim"),
        Probe::NotDue
    );
    f.end_rest(&pool()).await;
    assert_eq!(
        f.rests.claim_probes(&free, "a").await.expect("claim"),
        Probe::Claimed
    );
    assert!(matches!(
        f.rests.claim_probes(&free, "b").await.expect("claim"),
        Probe::Held(_)
    ));
}

async fn three_failures_from_one_user_do_not(f: Fixture) {
    // Colons in the unique part must not split one user into several.
    for unique in ["run1:attempt1", "run2:attempt1", "run3:attempt2", "run4"] {
        assert_eq!(
            f.rests
                .record_evidence(POOL, "alice", unique)
                .await
                .expect("evidence"),
            None
        );
    }
    assert_eq!(f.remaining(&pool()).await, -2);
}

async fn two_entries_from_two_users_do_not(f: Fixture) {
    assert_eq!(
        f.rests
            .record_evidence(POOL, "alice", "a")
            .await
            .expect("evidence"),
        None
    );
    assert_eq!(
        f.rests
            .record_evidence(POOL, "bob", "b")
            .await
            .expect("evidence"),
        None
    );
    // The same failure recorded again (a redelivered job) is not a new entry.
    assert_eq!(
        f.rests
            .record_evidence(POOL, "bob", "b")
            .await
            .expect("evidence"),
        None
    );
    assert_eq!(f.remaining(&pool()).await, -2);
}

#[tokio::test]
async fn entries_outside_the_window_do_not_count_by_redis_time() {
    let Some(f) = Fixture::redis().await else {
        return;
    };
    f.old_evidence("bob", "old1", 31_000).await;
    f.old_evidence("carol", "old2", 31_000).await;
    assert_eq!(
        f.rests
            .record_evidence(POOL, "alice", "new1")
            .await
            .expect("evidence"),
        None
    );
    assert_eq!(
        f.rests
            .record_evidence(POOL, "alice", "new2")
            .await
            .expect("evidence"),
        None
    );
    assert_eq!(f.remaining(&pool()).await, -2);
    let (rests, conn) = f.in_redis();
    let mut conn = conn.clone();
    let left: i64 = redis::cmd("ZCARD")
        .arg(rests.evidence_key(POOL))
        .query_async(&mut conn)
        .await
        .expect("ZCARD");
    assert_eq!(left, 2, "old entries are pruned");

    // One just inside the window does count.
    f.old_evidence("bob", "recent", 29_000).await;
    let rest = f
        .rests
        .record_evidence(POOL, "alice", "new3")
        .await
        .expect("evidence");
    assert!(rest.is_some());
}

async fn evidence_never_shortens_a_longer_pool_rest(f: Fixture) {
    f.rests
        .write(&pool(), RestLength::For(200_000), "account")
        .await
        .expect("write");
    for (user, unique) in [("alice", "1"), ("bob", "2")] {
        f.rests
            .record_evidence(POOL, user, unique)
            .await
            .expect("evidence");
    }
    let rest = f
        .rests
        .record_evidence(POOL, "carol", "3")
        .await
        .expect("evidence")
        .expect("rests");
    assert!(rest > 195_000, "{rest}");
    let listed = f.rests.list().await.expect("list");
    assert_eq!(listed[0].reason, "account");
}

#[tokio::test]
async fn a_short_rest_expires_in_redis_without_any_clear() {
    let Some(f) = Fixture::redis().await else {
        return;
    };
    let scope = route_scope(LLAMA_FREE);
    f.rests
        .write(&scope, RestLength::For(1_000), "brief")
        .await
        .expect("write");
    assert!(f.remaining(&scope).await > 0);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while f.remaining(&scope).await != -2 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "a 1 s rest outlived 10 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        f.rests
            .closures(&[route(LLAMA_FREE)])
            .await
            .expect("closures"),
        vec![None]
    );
    assert_eq!(
        f.rests.list().await.expect("list"),
        Vec::<ActiveRest>::new()
    );
    let (rests, conn) = f.in_redis();
    let mut conn = conn.clone();
    let indexed: i64 = redis::cmd("ZCARD")
        .arg(rests.index_key())
        .query_async(&mut conn)
        .await
        .expect("ZCARD");
    assert_eq!(indexed, 0, "listing prunes the index");
}

/// A user's own connection keeps per-route behaviour: its 429s and 402s close that route or
/// that connection, never the pool, and leave no evidence.
async fn user_connection_failures_never_touch_the_pool(f: Fixture) {
    let user_route = route("qwen/qwen3-coder:free@conn_1");
    let bare_429 = br#"{"error":{"code":429,"message":"Rate limit exceeded"}}"#;
    let per_minute = br#"{"error":{"message":"Rate limit exceeded: free-models-per-min. ","code":429,"metadata":{"headers":{"X-RateLimit-Limit":"20","X-RateLimit-Remaining":"0","X-RateLimit-Reset":"1785056700000"},"provider_name":null,"limit_source":"openrouter_free_tier_per_minute"}}}"#;
    let credits = br#"{"error":{"message":"Insufficient credits.","code":402,"metadata":{"limit_source":"openrouter_credits"}}}"#;
    let now = f.now_ms().await;
    for (status, body) in [
        (429, &bare_429[..]),
        (429, &per_minute[..]),
        (402, &credits[..]),
    ] {
        let c = classify_response(status, &Headers::new(), body, &user_route, now);
        assert!(!c.evidence);
        let length = c
            .length
            .expect("a rate limit or billing failure rests something");
        f.rests
            .write(&c.scope, length, c.rule)
            .await
            .expect("write");
    }
    assert_eq!(f.remaining(&pool()).await, -2);
    assert!(!f.has_evidence().await);
    let closures = f
        .rests
        .closures(&[user_route.clone(), route(LLAMA_FREE)])
        .await
        .expect("closures");
    assert_eq!(
        closures[0].as_ref().map(|c| c.kind),
        Some(RestKind::Circuit)
    );
    assert_eq!(closures[1], None, "the shared route stays open");
    let mut scopes: Vec<(String, String)> = f
        .rests
        .list()
        .await
        .expect("list")
        .into_iter()
        .map(|r| (r.scope, r.key))
        .collect();
    scopes.sort();
    assert_eq!(
        scopes,
        vec![
            ("connection".into(), "conn:conn_1".into()),
            ("route".into(), "conn:conn_1/qwen/qwen3-coder:free".into())
        ]
    );
}

async fn closures_return_the_longest_per_route(f: Fixture) {
    let chain = [
        route(LLAMA_FREE),
        route("openrouter/free"),
        route("openai/gpt-4o-mini"),
        route("x:free@conn_1"),
        route("y/z@conn_2"),
    ];
    assert_eq!(
        f.rests.closures(&chain).await.expect("closures"),
        vec![None; 5]
    );
    f.rests
        .write(&pool(), RestLength::For(100_000), "pool")
        .await
        .expect("write");
    f.rests
        .write(&route_scope(LLAMA_FREE), RestLength::For(200_000), "llama")
        .await
        .expect("write");
    f.rests
        .write(
            &route_scope("openai/gpt-4o-mini"),
            RestLength::For(20_000),
            "paid",
        )
        .await
        .expect("write");
    f.rests
        .write(
            &RestScope::Connection("conn:conn_1".into()),
            RestLength::For(50_000),
            "conn",
        )
        .await
        .expect("write");
    f.rests
        .write(
            &route_scope("x:free@conn_1"),
            RestLength::For(10_000),
            "user",
        )
        .await
        .expect("write");

    let got = f.rests.closures(&chain).await.expect("closures");
    let summary: Vec<Option<(RestKind, &str)>> = got
        .iter()
        .map(|c| c.as_ref().map(|c| (c.kind, c.reason.as_str())))
        .collect();
    assert_eq!(
        summary,
        vec![
            Some((RestKind::Route, "llama")),
            Some((RestKind::Pool, "pool")),
            Some((RestKind::Route, "paid")),
            Some((RestKind::Circuit, "conn")),
            None,
        ]
    );
    let remaining: Vec<u64> = got.iter().flatten().map(|c| c.remaining_ms).collect();
    for (ms, want) in remaining.iter().zip([200_000u64, 100_000, 20_000, 50_000]) {
        assert!(*ms <= want && want - ms < 2_000, "{ms} vs {want}");
    }

    // A platform circuit closes every platform route, shared or paid, and nothing else.
    let circuit = RestScope::Connection("platform:openrouter".into());
    f.rests
        .write(&circuit, RestLength::For(3_600_000), "billing")
        .await
        .expect("write");
    let kinds: Vec<Option<RestKind>> = f
        .rests
        .closures(&chain)
        .await
        .expect("closures")
        .iter()
        .map(|c| c.as_ref().map(|c| c.kind))
        .collect();
    assert_eq!(
        kinds,
        vec![
            Some(RestKind::Circuit),
            Some(RestKind::Circuit),
            Some(RestKind::Circuit),
            Some(RestKind::Circuit),
            None
        ]
    );
}

/// A made-up model's rest (a request can name any model) is counted against the user whose run
/// earned it: at most [`UNNAMED_RESTS_PER_USER`] a user and [`UNNAMED_RESTS`] in all, the
/// shortest-lived dropped first and counted; the configured scopes' rests are all kept. (3,000
/// made-up models left 9,000 hour-long rests: 30 MB of Redis, and a 4.8 MB `GET /v1/rests`.)
async fn rests_of_routes_no_configuration_names_are_bounded_per_user_and_in_all(f: Fixture) {
    let configured = [
        pool(),
        route_scope(LLAMA_FREE),
        RestScope::Connection("platform:openrouter".into()),
    ];
    for scope in &configured {
        f.rests
            .write(scope, RestLength::For(3_600_000), "configured")
            .await
            .expect("write");
    }
    let made_up = |n: usize| RestScope::Route {
        pool: None,
        route_key: format!("platform:openrouter/made-up/model-{n}"),
    };
    let write = async |n: usize, user: &str| {
        // Later writes rest longer: the first ones are the shortest-lived.
        let length = RestLength::For(60_000 + 10 * n as u64);
        f.rests
            .write_unnamed(&made_up(n), length, "gone on a made-up model", user)
            .await
            .expect("write");
    };
    // One user alone keeps only their latest.
    for n in 0..100 {
        write(n, "hog").await;
    }
    let resting = |listed: &[ActiveRest], n: usize| {
        let key = format!("platform:openrouter/made-up/model-{n}");
        listed.iter().any(|r| r.scope == "route" && r.key == key)
    };
    let listed = f.rests.list().await.expect("list");
    let kept: Vec<usize> = (0..100).filter(|&n| resting(&listed, n)).collect();
    assert_eq!(
        kept,
        (100 - UNNAMED_RESTS_PER_USER..100).collect::<Vec<_>>()
    );
    // Many users together keep the latest in all.
    let others = 2_900;
    for n in 100..100 + others {
        write(n, &format!("u{}", n % 145)).await;
    }
    let listed = f.rests.list().await.expect("list");
    let unnamed = listed.iter().filter(|r| r.key.contains("made-up")).count();
    assert_eq!(unnamed, UNNAMED_RESTS);
    assert!(resting(&listed, 100 + others - 1), "the latest is kept");
    assert!(!resting(&listed, 100), "the shortest-lived went first");
    for scope in &configured {
        assert!(f.remaining(scope).await > 0, "{scope:?} is kept");
    }
    let written = 100 + others;
    let dropped = f.rests.dropped().await.expect("dropped");
    assert_eq!(dropped as usize, written - UNNAMED_RESTS);
    if let Backend::Redis { conn, .. } = &f.backend {
        let (rests, _) = f.in_redis();
        let ns = rests.index_key().trim_end_matches(":rests").to_string();
        let mut conn = conn.clone();
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg(format!("*{ns}*"))
            .query_async(&mut conn)
            .await
            .expect("KEYS");
        // The rests, the index, the sets of the users who keep some, the count.
        assert!(keys.len() <= UNNAMED_RESTS + 200, "{} keys", keys.len());
    }
}

async fn list_and_clear(f: Fixture) {
    f.rests
        .write(&pool(), RestLength::For(100_000), "account 0:limit_source")
        .await
        .expect("write");
    f.rests
        .write(&route_scope(LLAMA_FREE), RestLength::For(90_000), "route")
        .await
        .expect("write");
    f.rests
        .write(
            &route_scope("openai/gpt-4o-mini"),
            RestLength::For(80_000),
            &ActiveRest::pause_reason("maintenance"),
        )
        .await
        .expect("write");
    f.rests
        .write(
            &RestScope::Connection("conn:conn_1".into()),
            RestLength::For(70_000),
            "auth",
        )
        .await
        .expect("write");
    f.rests
        .record_evidence(POOL, "alice", "1")
        .await
        .expect("evidence");

    let listed = f.rests.list().await.expect("list");
    let summary: Vec<(&str, &str, &str)> = listed
        .iter()
        .map(|r| (r.scope.as_str(), r.key.as_str(), r.reason.as_str()))
        .collect();
    assert_eq!(
        summary,
        vec![
            ("connection", "conn:conn_1", "auth"),
            ("pool", POOL, "account 0:limit_source"),
            (
                "route",
                "platform:openrouter/meta-llama/llama-3.3-70b-instruct:free",
                "route"
            ),
            (
                "route",
                "platform:openrouter/openai/gpt-4o-mini",
                "paused by the operator: maintenance"
            ),
        ]
    );
    let paused: Vec<bool> = listed.iter().map(|r| r.paused).collect();
    assert_eq!(
        paused,
        [false, false, false, true],
        "only the operator's pause lists as one"
    );
    assert!(
        listed
            .iter()
            .all(|r| r.remaining_ms > 60_000 && r.remaining_ms <= 100_000)
    );

    assert!(
        f.rests
            .clear(
                "route",
                "platform:openrouter/meta-llama/llama-3.3-70b-instruct:free"
            )
            .await
            .expect("clear")
    );
    assert!(
        !f.rests
            .clear(
                "route",
                "platform:openrouter/meta-llama/llama-3.3-70b-instruct:free"
            )
            .await
            .expect("clear")
    );
    assert!(
        f.rests
            .clear("route", "platform:openrouter/openai/gpt-4o-mini")
            .await
            .expect("clear")
    );
    assert!(f.rests.clear("pool", POOL).await.expect("clear"));
    assert!(
        !f.has_evidence().await,
        "clearing a pool drops its evidence"
    );
    assert!(!f.rests.clear("bogus", POOL).await.expect("clear"));
    assert!(!f.rests.clear("connection", "conn_2").await.expect("clear"));

    let listed = f.rests.list().await.expect("list");
    assert_eq!(listed.len(), 1);
    assert_eq!(
        (listed[0].scope.as_str(), listed[0].key.as_str()),
        ("connection", "conn:conn_1")
    );
    assert!(
        f.rests
            .clear("connection", "conn:conn_1")
            .await
            .expect("clear")
    );
    assert_eq!(
        f.rests.list().await.expect("list"),
        Vec::<ActiveRest>::new()
    );
    assert_eq!(f.rests.remaining(&pool()).await.expect("remaining"), None);
}

async fn closures_of_an_empty_chain_make_no_call(f: Fixture) {
    assert_eq!(f.rests.closures(&[]).await.expect("closures"), Vec::new());
}

async fn a_run_lease_has_one_holder_until_it_lets_go(f: Fixture) {
    let leases = &f.leases;
    let (first, second) = ("worker-a:1", "worker-b:2");
    assert_eq!(
        leases.acquire("run_1", first).await.unwrap(),
        Lease::Granted
    );
    let Lease::HeldFor(left) = leases.acquire("run_1", second).await.unwrap() else {
        panic!("a second executor must wait");
    };
    assert!(
        left <= LEASE_TTL && left > LEASE_TTL - Duration::from_secs(5),
        "{left:?}"
    );
    assert_eq!(
        leases.acquire("run_2", second).await.unwrap(),
        Lease::Granted,
        "leases are per run"
    );

    assert!(
        !leases.renew("run_1", second).await.unwrap(),
        "only the holder renews"
    );
    f.age_lease("run_1").await;
    assert!(leases.renew("run_1", first).await.unwrap());
    let Lease::HeldFor(left) = leases.acquire("run_1", second).await.unwrap() else {
        panic!("the renewed lease is still held");
    };
    assert!(
        left > LEASE_TTL - Duration::from_secs(5),
        "a renewal gives the lease its whole life again: {left:?}"
    );

    leases.release("run_1", second).await.unwrap();
    assert!(
        matches!(
            leases.acquire("run_1", second).await.unwrap(),
            Lease::HeldFor(_)
        ),
        "a release by another leaves the lease"
    );
    leases.release("run_1", first).await.unwrap();
    assert_eq!(
        leases.acquire("run_1", second).await.unwrap(),
        Lease::Granted
    );
    assert!(
        !leases.renew("run_1", first).await.unwrap(),
        "a lost lease is not renewed"
    );
}

/// Four replicas ask for a periodic chore's turn at once, each time.
async fn four_ask(leases: &Arc<dyn Leases>, period: Duration) -> usize {
    let asks = (0..4).map(|_| leases.take_period("canary:openrouter", period));
    let taken = futures_util::future::join_all(asks).await;
    taken
        .into_iter()
        .filter(|t| *t.as_ref().expect("take_period"))
        .count()
}

async fn a_period_is_taken_by_one_caller_as_it_ends_and_never_at_the_first_ask(f: Fixture) {
    let period = Duration::from_millis(400);
    assert_eq!(
        four_ask(&f.leases, period).await,
        0,
        "the first ask starts the first period"
    );
    assert_eq!(four_ask(&f.leases, period).await, 0, "within the period");
    f.pass(450).await;
    assert_eq!(
        four_ask(&f.leases, period).await,
        1,
        "one turn as the period ends"
    );
    assert_eq!(
        four_ask(&f.leases, period).await,
        0,
        "and the next period began"
    );
    if let Backend::Redis { leases, conn, .. } = &f.backend {
        let kept = pttl(conn, &leases.period_key("canary:openrouter")).await;
        assert!(
            (600..=800).contains(&kept),
            "an end is kept one period more: {kept} ms"
        );
    }
    f.pass(450).await;
    assert_eq!(four_ask(&f.leases, period).await, 1);
    f.pass(900).await;
    assert_eq!(
        four_ask(&f.leases, period).await,
        0,
        "a fleet that did not ask for a whole period starts over"
    );
}

/// The in-process rests keep Redis's clock rules on their own clock: evidence older than the
/// window no longer counts, and a rest ends when its time is up.
#[tokio::test]
async fn in_memory_evidence_and_rests_expire_on_the_clock() {
    // Checked to the millisecond: on a clock that only moves when told to.
    let f = Fixture::memory_on(InstantClock::frozen());
    let Backend::Memory { rests, clock } = &f.backend else {
        unreachable!("a memory fixture")
    };
    for (user, unique) in [("bob", "old1"), ("carol", "old2")] {
        assert_eq!(
            f.rests
                .record_evidence(POOL, user, unique)
                .await
                .expect("evidence"),
            None
        );
    }
    clock.advance(Duration::from_millis(EVIDENCE_WINDOW_MS + 1));
    assert_eq!(rests.evidence(POOL), 0, "outside the window");
    for unique in ["new1", "new2"] {
        let rest = f
            .rests
            .record_evidence(POOL, "alice", unique)
            .await
            .expect("evidence");
        assert_eq!(rest, None, "the old entries no longer count");
    }
    clock.advance(Duration::from_millis(EVIDENCE_WINDOW_MS - 1_000));
    let rest = f
        .rests
        .record_evidence(POOL, "bob", "new3")
        .await
        .expect("evidence");
    assert!(rest.is_some(), "entries inside the window corroborate");

    let scope = route_scope("openai/gpt-4o-mini");
    f.rests
        .write(&scope, RestLength::For(1_000), "brief")
        .await
        .expect("write");
    clock.advance(Duration::from_millis(999));
    assert_eq!(f.remaining(&scope).await, 1);
    clock.advance(Duration::from_millis(1));
    assert_eq!(f.remaining(&scope).await, -2);
    assert_eq!(
        f.rests
            .closures(&[route("openai/gpt-4o-mini")])
            .await
            .expect("closures")[0],
        None
    );
    clock.advance(Duration::from_millis(EVIDENCE_POOL_REST_MS));
    assert_eq!(
        f.rests.list().await.expect("list"),
        Vec::<ActiveRest>::new()
    );
}

/// The Redis events sink writes a run's events to its stream, which expires
/// `FREEWAY_EVENTS_KEEP_S` after the run ends and, for that grace, takes about what it holds.
#[tokio::test]
async fn events_go_to_the_runs_redis_stream_and_expire_after_it_ends() {
    use freeway::events::{Event, EventSink, RedisEvents, stream_key};
    use freeway::run::RunStatus;
    let Some(conn) = support::skip::redis().await else {
        return;
    };
    let ns = support::unique_ns("events");
    let events = RedisEvents::new(conn.clone(), ns.clone());
    let run = [
        Event::Started { worker: "w".into() },
        Event::Delta {
            text: "all ".into(),
        },
        Event::Delta {
            text: "done".into(),
        },
    ];
    for event in &run {
        events.publish("run_1", event).await.expect("publish");
    }
    let key = stream_key(&ns, "run_1");
    assert_eq!(
        pttl(&conn, &key).await,
        -1,
        "a running run's events do not expire"
    );
    let last = Event::Finished {
        status: RunStatus::Succeeded,
        code: None,
        usage: Default::default(),
    };
    events.publish("run_1", &last).await.expect("publish");
    let mut c = conn.clone();
    let entries: Vec<(String, Vec<(String, String)>)> = redis::cmd("XRANGE")
        .arg(&key)
        .arg("-")
        .arg("+")
        .query_async(&mut c)
        .await
        .expect("XRANGE");
    let read: Vec<Event> = entries
        .iter()
        .map(|(_, fields)| {
            assert_eq!(fields[0].0, "type");
            Event::from_json(&fields[1].1).expect("an event")
        })
        .collect();
    assert_eq!(read, [&run[..], &[last]].concat());
    // What the entries hold, and what Redis spends on them once the run has ended: no node's
    // room for more entries that will never come.
    let held: usize = entries
        .iter()
        .flat_map(|(id, fields)| {
            std::iter::once(id.len()).chain(fields.iter().map(|(k, v)| k.len() + v.len()))
        })
        .sum();
    let bytes: usize = redis::cmd("MEMORY")
        .arg("USAGE")
        .arg(&key)
        .query_async(&mut c)
        .await
        .expect("MEMORY USAGE");
    assert!(
        bytes <= held + 1024,
        "a finished run's stream of {held} bytes takes {bytes} bytes of Redis"
    );
    let ttl = pttl(&conn, &key).await;
    let keep_ms = freeway::events::DEFAULT_EVENTS_KEEP_S as i64 * 1000;
    assert!(
        ttl > keep_ms - 5_000 && ttl <= keep_ms,
        "expires FREEWAY_EVENTS_KEEP_S after the run's last event: {ttl} ms"
    );
}
