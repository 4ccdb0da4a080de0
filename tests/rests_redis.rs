//! Rests, and the runs' leases, against a real Redis (`REDIS_URL`, default
//! `redis://127.0.0.1:6379`).
//!
//! Each test works in its own namespace (`test-<ulid>`), so the tests run in parallel on one
//! server and never see each other's keys. Time comes from Redis throughout: where a test needs
//! an old evidence entry it writes one with Redis time instead of waiting.

use freeway::classify::{RestLength, RestScope, classify_response};
use freeway::headers::Headers;
use freeway::rest::{ActiveRest, RestKind, Rests};
use freeway::route::{Route, RouteSpec};
use redis::aio::ConnectionManager;
use std::time::Duration;

const POOL: &str = "openrouter-free";
const LLAMA_FREE: &str = "meta-llama/llama-3.3-70b-instruct:free";

struct Fixture {
    rests: Rests,
    conn: ConnectionManager,
}

async fn fixture() -> Fixture {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let client = redis::Client::open(url.as_str()).expect("REDIS_URL is a valid Redis URL");
    let conn = client
        .get_connection_manager()
        .await
        .unwrap_or_else(|e| panic!("these tests need a Redis at {url}: {e}"));
    let ns = format!("test-{}", ulid::Ulid::generate());
    Fixture {
        rests: Rests::new(conn.clone(), ns),
        conn,
    }
}

impl Fixture {
    async fn pttl(&self, key: &str) -> i64 {
        let mut conn = self.conn.clone();
        redis::cmd("PTTL")
            .arg(key)
            .query_async(&mut conn)
            .await
            .expect("PTTL")
    }

    async fn exists(&self, key: &str) -> bool {
        let mut conn = self.conn.clone();
        let n: i64 = redis::cmd("EXISTS")
            .arg(key)
            .query_async(&mut conn)
            .await
            .expect("EXISTS");
        n > 0
    }

    async fn redis_now_ms(&self) -> u64 {
        let mut conn = self.conn.clone();
        let (s, us): (u64, u64) = redis::cmd("TIME")
            .query_async(&mut conn)
            .await
            .expect("TIME");
        s * 1000 + us / 1000
    }

    /// An evidence entry written `age_ms` ago by Redis time.
    async fn old_evidence(&self, user: &str, unique: &str, age_ms: u64) {
        let now = self.redis_now_ms().await;
        let mut conn = self.conn.clone();
        let _: i64 = redis::cmd("ZADD")
            .arg(self.rests.evidence_key(POOL))
            .arg(now - age_ms)
            .arg(format!("{user}:{unique}"))
            .query_async(&mut conn)
            .await
            .expect("ZADD");
    }

    fn pool_key(&self) -> String {
        self.rests.key_for(&pool()).expect("a pool has a key")
    }
}

fn pool() -> RestScope {
    RestScope::Pool(POOL.into())
}

fn route(s: &str) -> Route {
    Route::resolve(&RouteSpec::parse_cli(s)).expect("test routes are valid")
}

fn route_scope(s: &str) -> RestScope {
    let r = route(s);
    RestScope::Route {
        pool: r.pool.clone(),
        route_key: r.key(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writers_keep_the_longest() {
    let f = fixture().await;
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
        let pttl = f.pttl(&f.rests.key_for(&scope).expect("key")).await;
        assert!(
            pttl as u64 <= longest && longest - (pttl as u64) < 2_000,
            "{scope:?}: {pttl} vs {longest}"
        );
    }
}

#[tokio::test]
async fn a_shorter_write_never_shortens() {
    let f = fixture().await;
    let scope = route_scope(LLAMA_FREE);
    assert_eq!(
        f.rests
            .write(&scope, RestLength::For(120_000), "first")
            .await
            .expect("write"),
        120_000
    );
    let now = f.redis_now_ms().await;
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

#[tokio::test]
async fn writes_are_capped_by_scope() {
    let f = fixture().await;
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
    let far = f.redis_now_ms().await + 86_400_000;
    assert_eq!(
        f.rests
            .write(&pool(), RestLength::Until(far), "daily")
            .await
            .expect("write"),
        300_000
    );
    assert!(f.pttl(&f.pool_key()).await <= 300_000);
}

#[tokio::test]
async fn until_uses_redis_time_and_the_past_rests_one_second() {
    let f = fixture().await;
    let scope = route_scope("openai/gpt-4o-mini");
    assert_eq!(
        f.rests
            .write(&scope, RestLength::Until(1), "past")
            .await
            .expect("write"),
        1_000
    );
    let other = route_scope("openai/gpt-4o");
    let at = f.redis_now_ms().await + 20_000;
    let remaining = f
        .rests
        .write(&other, RestLength::Until(at), "reset")
        .await
        .expect("write");
    assert!((19_000..=20_000).contains(&remaining), "{remaining}");
}

#[tokio::test]
async fn nothing_to_close_writes_nothing() {
    let f = fixture().await;
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

#[tokio::test]
async fn three_failures_from_two_users_rest_the_pool() {
    let f = fixture().await;
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
    assert_eq!(f.rests.pool_rest(POOL).await.expect("pool_rest"), None);
    let rest = f
        .rests
        .record_evidence(POOL, "team:alice", "run3")
        .await
        .expect("evidence");
    let rest = rest.expect("corroborated evidence rests the pool");
    assert!((59_000..=60_000).contains(&rest), "{rest}");
    let pool_rest = f
        .rests
        .pool_rest(POOL)
        .await
        .expect("pool_rest")
        .expect("the pool rests");
    assert!(pool_rest <= 60_000 && pool_rest > 58_000);
    let evidence_ttl = f.pttl(&f.rests.evidence_key(POOL)).await;
    assert!(evidence_ttl > 0 && evidence_ttl <= 60_000, "{evidence_ttl}");
    let listed = f.rests.list().await.expect("list");
    assert_eq!(listed.len(), 1);
    assert_eq!(
        (listed[0].scope.as_str(), listed[0].key.as_str()),
        ("pool", POOL)
    );
}

#[tokio::test]
async fn three_failures_from_one_user_do_not() {
    let f = fixture().await;
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
    assert!(!f.exists(&f.pool_key()).await);
}

#[tokio::test]
async fn two_entries_from_two_users_do_not() {
    let f = fixture().await;
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
    assert!(!f.exists(&f.pool_key()).await);
}

#[tokio::test]
async fn entries_outside_the_window_do_not_count() {
    let f = fixture().await;
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
    assert!(!f.exists(&f.pool_key()).await);
    let mut conn = f.conn.clone();
    let left: i64 = redis::cmd("ZCARD")
        .arg(f.rests.evidence_key(POOL))
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

#[tokio::test]
async fn evidence_never_shortens_a_longer_pool_rest() {
    let f = fixture().await;
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
async fn a_short_rest_expires_without_any_clear() {
    let f = fixture().await;
    let scope = route_scope(LLAMA_FREE);
    f.rests
        .write(&scope, RestLength::For(1_000), "brief")
        .await
        .expect("write");
    let key = f.rests.key_for(&scope).expect("key");
    assert!(f.pttl(&key).await > 0);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while f.pttl(&key).await != -2 {
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
    let mut conn = f.conn.clone();
    let indexed: i64 = redis::cmd("ZCARD")
        .arg(f.rests.index_key())
        .query_async(&mut conn)
        .await
        .expect("ZCARD");
    assert_eq!(indexed, 0, "listing prunes the index");
}

/// A user's own connection keeps per-route behaviour: its 429s and 402s close that route or
/// that connection, never the pool, and leave no evidence.
#[tokio::test]
async fn user_connection_failures_never_touch_the_pool() {
    let f = fixture().await;
    let user_route = route("qwen/qwen3-coder:free@conn_1");
    let bare_429 = br#"{"error":{"code":429,"message":"Rate limit exceeded"}}"#;
    let per_minute = br#"{"error":{"message":"Rate limit exceeded: free-models-per-min. ","code":429,"metadata":{"headers":{"X-RateLimit-Limit":"20","X-RateLimit-Remaining":"0","X-RateLimit-Reset":"1785056700000"},"provider_name":null,"limit_source":"openrouter_free_tier_per_minute"}}}"#;
    let credits = br#"{"error":{"message":"Insufficient credits.","code":402,"metadata":{"limit_source":"openrouter_credits"}}}"#;
    let now = f.redis_now_ms().await;
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
    assert!(!f.exists(&f.pool_key()).await);
    assert!(!f.exists(&f.rests.evidence_key(POOL)).await);
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

#[tokio::test]
async fn closures_return_the_longest_per_route() {
    let f = fixture().await;
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

#[tokio::test]
async fn list_and_clear() {
    let f = fixture().await;
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
            "paid",
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
            ("route", "platform:openrouter/openai/gpt-4o-mini", "paid"),
        ]
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
        !f.exists(&f.rests.evidence_key(POOL)).await,
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
    assert_eq!(f.rests.pool_rest(POOL).await.expect("pool_rest"), None);
}

#[tokio::test]
async fn closures_of_an_empty_chain_make_no_call() {
    let f = fixture().await;
    assert_eq!(f.rests.closures(&[]).await.expect("closures"), Vec::new());
}

#[tokio::test]
async fn a_run_lease_has_one_holder_until_it_lets_go() {
    use freeway::lease::{LEASE_TTL, Lease, Leases};
    let f = fixture().await;
    let ns = format!("test-{}", ulid::Ulid::generate());
    let leases = Leases::new(f.conn.clone(), ns.clone());
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
    let key = leases.key("run_1");
    let mut conn = f.conn.clone();
    let _: () = redis::cmd("PEXPIRE")
        .arg(&key)
        .arg(1_000)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(leases.renew("run_1", first).await.unwrap());
    let pttl = f.pttl(&key).await;
    assert!(
        pttl > 1_000,
        "a renewal gives the lease its whole life again: {pttl} ms"
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
