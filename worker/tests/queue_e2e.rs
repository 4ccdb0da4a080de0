//! The queue end to end (docs/design.md §4): worker processes on a real Redis take runs, snooze
//! them while the shared pool rests instead of failing them, survive a `kill -9` of a replica, and
//! dead-letter poison jobs while valid runs keep completing.

mod support;

use freeway::catalog::Catalog;
use freeway::chat::ToolCall;
use freeway::classify::{RestLength, RestScope};
use freeway::job::Continuation;
use freeway::rest::{RedisRests, Rests};
use freeway::route::OPENROUTER_FREE_POOL;
use freeway::store::Store;
use std::time::Duration;
use support::{Cluster, PrivateRedis, last, request, types};

const FREE_A: &str = "meta-llama/llama-3.3-70b-instruct:free";
const FREE_B: &str = "qwen/qwen3-coder:free";
const PAID: &str = "openai/gpt-4o-mini";
const WAIT: Duration = Duration::from_secs(30);

fn rests(c: &Cluster) -> RedisRests {
    RedisRests::new(c.conn.clone(), c.ns.clone())
}

async fn rest_pool(c: &Cluster, ms: u64) {
    rests(c)
        .write(
            &RestScope::Pool(OPENROUTER_FREE_POOL.into()),
            RestLength::For(ms),
            "test rest",
        )
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn while_the_pool_rests_free_runs_are_delayed_then_complete_and_paid_routes_run_at_once() {
    let Some(mut c) = Cluster::start("rest", sim::SimConfig::default()).await else {
        return;
    };
    c.spawn_worker(&[]);
    c.spawn_worker(&[]);
    rest_pool(&c, 2_000).await;
    let free = c.enqueue(request("u1", "hi", &[FREE_A, FREE_B])).await;
    let paid = c.enqueue(request("u2", "hi", &[FREE_A, PAID])).await;

    let events = c.wait(&paid.run_id, WAIT).await;
    assert_eq!(last(&events)["status"], "succeeded", "{events:?}");
    assert!(
        !types(&events).contains(&"delayed".to_string()),
        "the paid route runs during the rest"
    );

    let events = c.wait(&free.run_id, WAIT).await;
    let kinds = types(&events);
    assert_eq!(last(&events)["status"], "succeeded", "{events:?}");
    let delayed = kinds
        .iter()
        .position(|k| k == "delayed")
        .expect("delayed first");
    let started = kinds
        .iter()
        .rposition(|k| k == "started")
        .expect("started after");
    assert!(delayed < started, "{kinds:?}");
    let rec = c.store.run(&free.run_id).await.unwrap().unwrap();
    assert_eq!(
        rec.state.counters.calls, 1,
        "no call was spent into the resting pool"
    );
    let models: Vec<String> = c.sim.calls().into_iter().map(|r| r.model).collect();
    assert_eq!(models.iter().filter(|m| *m == PAID).count(), 1);
    assert_eq!(
        models.iter().filter(|m| *m == FREE_A).count(),
        1,
        "{models:?}"
    );
    c.assert_budgets(&[free, paid]).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_continuation_runs_once_while_the_pool_rests() {
    let Some(mut c) = Cluster::start("continuation", sim::SimConfig::default()).await else {
        return;
    };
    c.spawn_worker(&[]);
    rest_pool(&c, 60_000).await;
    let mut job = freeway::job::RunJob::new(
        request("u1", "x", &[FREE_A, PAID]),
        freeway::clock::epoch_ms(),
    );
    job.continuation = Some(Continuation {
        parent_run_id: "run_parent".into(),
        tool_call: ToolCall {
            id: "call_1".into(),
            name: "lookup".into(),
            arguments: "{}".into(),
            extra_content: None,
        },
        result: "approved".into(),
    });
    // The parent a continuation answers: the same user's run, on the same conversation.
    c.store
        .create_run(&freeway::run::RunRecord {
            run_id: "run_parent".into(),
            ..freeway::run::RunRecord::queued(&job, freeway::clock::epoch_ms())
        })
        .await
        .unwrap();
    c.queue.push(std::slice::from_ref(&job)).await.unwrap();
    let events = c.wait(&job.run_id, WAIT).await;
    assert_eq!(last(&events)["status"], "succeeded", "{events:?}");
    let models: Vec<String> = c.sim.calls().into_iter().map(|r| r.model).collect();
    assert_eq!(
        models,
        vec![FREE_A.to_string()],
        "exactly one attempt, rests ignored"
    );
    c.assert_budgets(&[job]).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_survives_a_kill_9_of_its_worker() {
    let Some(mut c) = Cluster::start("kill", sim::SimConfig::default()).await else {
        return;
    };
    // The first call hangs long enough to kill the worker in the middle of it.
    let mut hang = sim::FaultSpec::new(sim::FaultKind::Timeout);
    hang.delay_ms = Some(60_000);
    c.sim.inject(hang);
    let first = c.spawn_worker(&[]);
    let job = c.enqueue(request("u1", "survive", &[PAID])).await;
    // Wait for the attempt and for the sim to hold its call: the run is in flight.
    c.wait_for(&job.run_id, WAIT, |e| e["type"] == "attempt")
        .await;
    wait_until_faults_consumed(&c).await;
    c.kill(first);
    // The dead worker's lease would keep the run from others for its 30 s (a rule of the lease
    // suite, TTL read from Redis); this test is about what happens after, so those 30 s pass now.
    let lease = format!("{}:run:{}:lease", c.ns, job.run_id);
    let deleted: u64 = redis::cmd("DEL")
        .arg(&lease)
        .query_async(&mut c.conn.clone())
        .await
        .unwrap();
    assert_eq!(deleted, 1, "the killed worker held the run's lease");
    c.spawn_worker(&[]);
    let events = c.wait(&job.run_id, Duration::from_secs(60)).await;
    assert_eq!(last(&events)["status"], "succeeded", "{events:?}");
    let transcript = c.store.transcript(&job.conversation_id).await.unwrap();
    let roles: Vec<_> = transcript.iter().map(|m| m.role).collect();
    assert_eq!(
        roles,
        vec![freeway::chat::Role::User, freeway::chat::Role::Assistant],
        "one user message, one answer"
    );
    let rec = c.store.run(&job.run_id).await.unwrap().unwrap();
    assert_eq!(
        rec.state.counters.calls, 2,
        "the interrupted call stays counted"
    );
    c.assert_budgets(&[job]).await;
}

/// Poll the sim's pending faults until every injected one has struck.
async fn wait_until_faults_consumed(c: &Cluster) {
    let url = c.sim.base_url().replace("/api/v1", "/_sim/faults");
    let client = reqwest::Client::new();
    let deadline = tokio::time::Instant::now() + WAIT;
    while tokio::time::Instant::now() < deadline {
        let pending: Vec<serde_json::Value> = serde_json::from_slice(
            &client
                .get(&url)
                .send()
                .await
                .unwrap()
                .bytes()
                .await
                .unwrap(),
        )
        .unwrap();
        if pending.is_empty() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the sim never received the call");
}

#[tokio::test(flavor = "multi_thread")]
async fn poison_jobs_are_dead_lettered_while_valid_runs_complete() {
    let Some(mut c) = Cluster::start("poison", sim::SimConfig::default()).await else {
        return;
    };
    let mut payloads: Vec<Vec<u8>> = Vec::new();
    for i in 0..1000 {
        payloads.push(match i % 4 {
            0 => br#"{"v":1}"#.to_vec(),
            1 => br#"{"hello":"world"}"#.to_vec(),
            2 => br#"[1,2,3]"#.to_vec(),
            _ => format!(r#"{{"v":99,"run_id":"run_{i}"}}"#).into_bytes(),
        });
    }
    c.queue.push_payloads(payloads).await.unwrap();
    let valid = c.enqueue(request("u1", "still works", &[PAID])).await;
    c.spawn_worker(&[]);
    c.spawn_worker(&[]);
    let events = c.wait(&valid.run_id, WAIT).await;
    assert_eq!(last(&events)["status"], "succeeded");
    c.watch_queue(WAIT, |d| d.dead == 1000).await;
    let log = c.log(0) + &c.log(1);
    assert!(
        log.contains("invalid_job") || log.contains("invalid job"),
        "the reason is logged"
    );
    for n in 0..2 {
        assert!(
            c.workers[n].try_wait().unwrap().is_none(),
            "worker {n} is still running"
        );
    }
    c.assert_budgets(&[valid]).await;
}

/// A run recorded with a job no worker can read (another version's), as a producer of another
/// release might leave: recorded `queued`, never runnable.
async fn record_unreadable(c: &Cluster, user: &str) -> freeway::job::RunJob {
    let mut job = freeway::job::RunJob::new(
        request(user, "unreadable", &[PAID]),
        freeway::clock::epoch_ms(),
    );
    job.v = 99;
    c.store.create_queued(&job, job.enqueued_ms).await.unwrap();
    job
}

/// Block until the store has `run_id` settled; returns it.
async fn stored_settled(c: &Cluster, run_id: &str, timeout: Duration) -> freeway::run::RunRecord {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let run = c.store.run(run_id).await.unwrap().expect("recorded");
        if run.status.is_settled() {
            return run;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{run_id} is still {}: {}",
            run.status.as_str(),
            c.log_tail(0)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_dead_lettered_job_ends_its_run_invalid_job_and_names_no_other() {
    let Some(mut c) = Cluster::start("deadrun", sim::SimConfig::default()).await else {
        return;
    };
    let unreadable = record_unreadable(&c, "u1").await;
    let valid = c.enqueue(request("u2", "still works", &[PAID])).await;
    c.store
        .create_queued(&valid, valid.enqueued_ms)
        .await
        .unwrap();
    // Its own entry, and a poison entry that names the valid run.
    let mut impostor = serde_json::to_value(&valid).unwrap();
    impostor["v"] = serde_json::json!(99);
    c.queue
        .push_payloads(vec![
            serde_json::to_vec(&unreadable).unwrap(),
            serde_json::to_vec(&impostor).unwrap(),
        ])
        .await
        .unwrap();
    c.spawn_worker(&[]);
    let ended = stored_settled(&c, &unreadable.run_id, WAIT).await;
    assert_eq!(
        (ended.status.as_str(), ended.code.map(|c| c.as_str())),
        ("failed", Some("invalid_job"))
    );
    assert!(
        ended
            .summary
            .as_deref()
            .unwrap_or_default()
            .contains("version"),
        "{:?}",
        ended.summary
    );
    let events = c.wait(&unreadable.run_id, WAIT).await;
    assert_eq!(last(&events)["code"], "invalid_job");
    let run = stored_settled(&c, &valid.run_id, WAIT).await;
    assert_eq!(
        run.status.as_str(),
        "succeeded",
        "the impostor entry ended nothing"
    );
    c.watch_queue(WAIT, |d| d.dead == 2).await;
    assert_eq!(c.chat_calls(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_reconciler_is_not_blinded_by_runs_it_cannot_act_on() {
    let Some(mut c) = Cluster::start("blind", sim::SimConfig::default()).await else {
        return;
    };
    let batch = queue::enqueue::RECONCILE_BATCH as usize;
    let mut unreadable = Vec::new();
    for i in 0..batch + 100 {
        unreadable.push(record_unreadable(&c, &format!("u{i}")).await);
    }
    // Recorded after them and never pushed: what Redis lost (or a killed producer left).
    let mut lost = Vec::new();
    for i in 0..20 {
        let job = freeway::job::RunJob::new(
            request(&format!("v{i}"), "lost", &[PAID]),
            freeway::clock::epoch_ms(),
        );
        c.store.create_queued(&job, job.enqueued_ms).await.unwrap();
        lost.push(job);
    }
    c.spawn_worker(&["--reconcile-s", "1"]);
    for job in &lost {
        let run = stored_settled(&c, &job.run_id, Duration::from_secs(60)).await;
        assert_eq!(run.status.as_str(), "succeeded", "{}", job.run_id);
    }
    for job in &unreadable {
        let run = stored_settled(&c, &job.run_id, WAIT).await;
        assert_eq!(run.code.map(|c| c.as_str()), Some("invalid_job"));
    }
    assert_eq!(c.chat_calls(), 20, "each lost run called once");
    assert!(c.log(0).contains("cannot be read"), "{}", c.log_tail(0));
}

/// A round that stops short leaves its cursor in Redis: the next round starts after it, and the
/// round that reaches the end clears it, so the one after starts over from the oldest run.
/// (Each round read the same oldest runs: runs it could not act on filled it every time.)
#[tokio::test(flavor = "multi_thread")]
async fn the_reconciler_resumes_at_its_cursor_and_starts_over_after_the_end() {
    use freeway::store::Store;
    let Some(c) = Cluster::start("cursor", sim::SimConfig::default()).await else {
        return;
    };
    let mut lost = Vec::new();
    for i in 0..3 {
        let job = freeway::job::RunJob::new(
            request(&format!("u{i}"), "lost", &[PAID]),
            freeway::clock::epoch_ms(),
        );
        c.store.create_queued(&job, 1_000 + i).await.unwrap();
        lost.push(job);
    }
    let enqueuer =
        queue::enqueue::Enqueuer::new(c.conn.clone(), &c.ns, std::sync::Arc::new(c.store.clone()));
    // Where a round that stopped after the first run would have left it.
    let first = c
        .store
        .unsettled_jobs(i64::MAX as u64, i64::MAX as u64, None, 1)
        .await
        .unwrap()
        .remove(0)
        .cursor();
    assert_eq!(first.run_id, lost[0].run_id);
    let cursor = format!("{}:reconcile:cursor", c.ns);
    let mut conn = c.conn.clone();
    let _: () = redis::cmd("SET")
        .arg(&cursor)
        .arg(format!("{} {}", first.updated_ms, first.run_id))
        .query_async(&mut conn)
        .await
        .unwrap();
    let round = Duration::from_millis(1);
    let pushed = |r: Option<queue::enqueue::Reconciled>| r.expect("this round's turn").pushed;
    let done = enqueuer.reconcile(Duration::ZERO, round).await.unwrap();
    assert_eq!(
        pushed(done),
        2,
        "the runs after the cursor, not the one before it"
    );
    let left: Option<String> = redis::cmd("GET")
        .arg(&cursor)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(
        left, None,
        "the round reached the end: the next starts over"
    );
    tokio::time::sleep(Duration::from_millis(5)).await; // the 1 ms turn of the last round
    let done = enqueuer.reconcile(Duration::ZERO, round).await.unwrap();
    assert_eq!(pushed(done), 1, "the run before the old cursor, now");
    let depth = c.queue.snapshot().await.unwrap().0;
    assert_eq!(depth.waiting, 3, "{depth:?}");
}

/// Entries whose bytes are not a JSON value at all: apalis cannot decode them before the handler.
fn undecodable_entries() -> Vec<Vec<u8>> {
    let deep = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n)).into_bytes();
    vec![
        b"not json".to_vec(),
        b"\xff\xfe\x00\x01".to_vec(),
        br#"{"v":1,"run_id":"#.to_vec(),
        Vec::new(),
        deep(100_000),
        deep(200),
    ]
}

#[tokio::test(flavor = "multi_thread")]
async fn undecodable_entries_are_dead_lettered_within_a_poll_and_strand_no_run() {
    let Some(mut c) = Cluster::start("undecodable", sim::SimConfig::default()).await else {
        return;
    };
    let poison = undecodable_entries();
    let n_poison = poison.len() as u64;
    c.queue.push_payloads(poison).await.unwrap();
    let mut valid = Vec::new();
    for i in 0..10 {
        valid.push(
            c.enqueue(request(&format!("u{i}"), "behind the poison", &[PAID]))
                .await,
        );
    }
    let started = std::time::Instant::now();
    c.spawn_worker(&[]);
    for run in &valid {
        let events = c.wait(&run.run_id, Duration::from_secs(15)).await;
        assert_eq!(last(&events)["status"], "succeeded", "{}", run.run_id);
    }
    let elapsed = started.elapsed();
    eprintln!("undecodable probe: 10 valid runs behind 6 poison entries finished in {elapsed:?}");
    assert!(
        elapsed < Duration::from_secs(15),
        "the valid runs took {elapsed:?}"
    );
    c.watch_queue(Duration::from_secs(15), |d| d.dead == n_poison)
        .await;
    let log = c.log(0);
    assert!(log.contains("undecodable entry"), "the reason is logged");
    assert!(
        !log.contains("restarting"),
        "the worker never died: {}",
        c.log_tail(0)
    );
    assert!(c.workers[0].try_wait().unwrap().is_none(), "still running");
    c.assert_budgets(&valid).await;
}

/// A cluster on `redis` whose calls take `latency_ms`, and `n` paid runs enqueued (recorded in
/// the store, as the producer does) for as many users.
async fn recorded_runs_on(
    redis: &PrivateRedis,
    name: &str,
    latency_ms: u64,
    n: usize,
) -> (Cluster, Vec<String>) {
    let config = sim::SimConfig {
        latency_ms,
        ..sim::SimConfig::default()
    };
    let c = Cluster::start_on(name, config, redis.url.clone())
        .await
        .expect("the test's own Redis answers");
    let enqueuer =
        queue::Enqueuer::new(c.conn.clone(), &c.ns, std::sync::Arc::new(c.store.clone()));
    let mut runs = Vec::new();
    for i in 0..n {
        let req = request(&format!("u{i}"), name, &[PAID]);
        match enqueuer.enqueue(req).await.unwrap() {
            queue::enqueue::Outcome::Enqueued { run_id } => runs.push(run_id),
            other => panic!("{other:?}"),
        }
    }
    (c, runs)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_redis_that_loses_its_data_loses_no_run() {
    let Some(redis) = PrivateRedis::start().await else {
        return;
    };
    let (mut c, runs) = recorded_runs_on(&redis, "flushall", 1_500, 20).await;
    for _ in 0..2 {
        c.spawn_worker(&["--concurrency", "4", "--reconcile-s", "2"]);
    }
    // Some runs are in the middle of their call, the rest wait in the queue.
    let deadline = tokio::time::Instant::now() + WAIT;
    while c.sim.calls().len() < 4 {
        assert!(tokio::time::Instant::now() < deadline, "no call started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    redis.flushall().await;
    let flushed = std::time::Instant::now();
    let in_flight_at_flush = 8;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(180);
    for run_id in &runs {
        loop {
            let run = c
                .store
                .run(run_id)
                .await
                .unwrap()
                .expect("recorded at enqueue");
            if run.status.is_settled() {
                assert_eq!(run.status.as_str(), "succeeded", "{run_id}: {run:?}");
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{run_id} is still {}: {}",
                run.status.as_str(),
                c.log_tail(0)
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let calls = c.sim.calls().len();
    eprintln!(
        "FLUSHALL probe: 20 runs succeeded {:?} after the flush, {calls} provider calls",
        flushed.elapsed()
    );
    assert_eq!(
        calls, 20,
        "{calls} calls for 20 runs: the {in_flight_at_flush} in flight at the flush kept their \
         leases (taken again once Redis forgot them), so none was paid for twice"
    );
    let log = c.log(0) + &c.log(1);
    assert!(
        log.contains("Redis kept nothing of this run"),
        "the reconciler says what it did"
    );
}

/// Redis forgets everything (FLUSHALL) while every run is in the middle of its call: the
/// reconciler, rounds every second, does not hand the running runs to another executor while
/// their own are still calling — each run is paid for once. (Every run in flight was paid for
/// twice: its lease gone, the reconciler pushed it again at once.)
#[tokio::test(flavor = "multi_thread")]
async fn a_flushall_mid_call_pays_for_no_call_twice() {
    let Some(redis) = PrivateRedis::start().await else {
        return;
    };
    let (mut c, runs) = recorded_runs_on(&redis, "flushmid", 6_000, 8).await;
    for _ in 0..2 {
        c.spawn_worker(&["--concurrency", "16", "--reconcile-s", "1"]);
    }
    c.sim_until(WAIT, |sim| sim.calls().len() == 8).await;
    redis.flushall().await;
    for run_id in &runs {
        let run = stored_settled(&c, run_id, Duration::from_secs(60)).await;
        assert_eq!(run.status.as_str(), "succeeded", "{run_id}");
    }
    assert_eq!(c.sim.calls().len(), 8, "one call per run");
}

/// The store stops taking writes (the worker's disk is full) while a run's call is in flight:
/// the answer it paid for is kept in Redis, and once the disk has room the run's next delivery
/// stores it and the run succeeds, with one call in all. (The answer was lost and bought again.)
#[tokio::test(flavor = "multi_thread")]
async fn an_answer_the_store_could_not_take_is_kept_and_not_bought_again() {
    let config = sim::SimConfig {
        latency_ms: 2_000,
        ..sim::SimConfig::default()
    };
    let Some(mut c) = Cluster::start("unsaved", config).await else {
        return;
    };
    let n = c.spawn_worker(&[]);
    let job = c.enqueue(request("u1", "keep me", &[PAID])).await;
    c.wait_for(&job.run_id, WAIT, |e| e["type"] == "attempt")
        .await;
    let pid = c.workers[n].id();
    let limit = |soft: &str| {
        let status = std::process::Command::new("prlimit")
            .args([
                "--pid",
                &pid.to_string(),
                &format!("--fsize={soft}:unlimited"),
            ])
            .status()
            .expect("prlimit (util-linux) on PATH");
        assert!(status.success());
    };
    // Not one more byte: the save after the answer fails as on a full disk.
    limit("1");
    answer_kept(&c, &job.run_id).await;
    limit("unlimited");
    let run = stored_settled(&c, &job.run_id, Duration::from_secs(60)).await;
    assert_eq!(run.status.as_str(), "succeeded");
    assert!(!run.output.is_empty(), "the kept answer is stored");
    assert_eq!(c.sim.calls().len(), 1, "the answer was bought once");
}

/// A PostgreSQL server of the test's own (`scripts/services.sh`), stopped for real during the
/// test and removed when it ends.
struct OwnPostgres {
    dir: String,
    url: String,
}

impl OwnPostgres {
    fn start() -> OwnPostgres {
        let out = services(r#"start_postgres >&2 && echo "$PG_URL $PG_DIR""#);
        let (url, dir) = out.trim().split_once(' ').expect("a URL and a directory");
        OwnPostgres {
            dir: dir.to_string(),
            url: url.to_string(),
        }
    }

    fn stop(&self) {
        services(&format!("pg_server stop {}", self.dir));
    }

    fn restart(&self) {
        services(&format!("pg_server start {}", self.dir));
    }
}

impl Drop for OwnPostgres {
    fn drop(&mut self) {
        let _ = std::process::Command::new("bash")
            .arg("-c")
            .arg(format!(
                ". {}/../scripts/services.sh && pg_server stop {dir} >/dev/null 2>&1; rm -rf {dir}",
                env!("CARGO_MANIFEST_DIR"),
                dir = self.dir
            ))
            .status();
    }
}

/// What `script` prints, run with `scripts/services.sh`'s functions; it must succeed.
fn services(script: &str) -> String {
    let out = std::process::Command::new("bash")
        .arg("-c")
        .arg(format!(
            ". {}/../scripts/services.sh && {script}",
            env!("CARGO_MANIFEST_DIR")
        ))
        .stderr(std::process::Stdio::inherit())
        .output()
        .expect("bash runs");
    assert!(out.status.success(), "{script} failed");
    String::from_utf8(out.stdout).expect("text")
}

/// The PostgreSQL server stops (a fast shutdown: every session cut) while a run's call is in
/// flight: the answer is kept in Redis, and once the server is back the run succeeds with one
/// call. (Its answer could not be saved, and the call was made again.) Skipped, loudly, without
/// `PG_URL`: `scripts/test.sh` sets it where PostgreSQL is installed.
#[tokio::test(flavor = "multi_thread")]
async fn an_answer_kept_through_a_postgres_outage_is_bought_once() {
    if std::env::var("PG_URL")
        .ok()
        .filter(|u| !u.is_empty())
        .is_none()
    {
        support::skip::skipped("PostgreSQL", "PG_URL is not set");
        return;
    }
    let pg = tokio::task::spawn_blocking(OwnPostgres::start)
        .await
        .expect("a server of its own");
    let config = sim::SimConfig {
        latency_ms: 2_000,
        ..sim::SimConfig::default()
    };
    let redis_url = support::skip::redis_url();
    let Some(mut c) = Cluster::start_with("pgdown", config, redis_url, Some(pg.url.clone())).await
    else {
        return;
    };
    c.spawn_worker(&[]);
    let job = c
        .enqueue(request("u1", "through the outage", &[PAID]))
        .await;
    c.wait_for(&job.run_id, WAIT, |e| e["type"] == "attempt")
        .await;
    let stopped = std::time::Instant::now();
    tokio::task::block_in_place(|| pg.stop());
    answer_kept(&c, &job.run_id).await;
    tokio::task::block_in_place(|| pg.restart());
    let run = stored_settled(&c, &job.run_id, Duration::from_secs(60)).await;
    eprintln!(
        "postgres outage: the run was stored {:?} after the server stopped",
        stopped.elapsed()
    );
    assert_eq!(run.status.as_str(), "succeeded");
    assert_eq!(c.sim.calls().len(), 1, "the answer was bought once");
}

/// Block until the writes of `run_id`'s refused save are kept in Redis (`freeway::unsaved`).
async fn answer_kept(c: &Cluster, run_id: &str) {
    let kept = format!("{}:run:{run_id}:unsaved", c.ns);
    let mut conn = c.conn.clone();
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let exists: bool = redis::cmd("EXISTS")
            .arg(&kept)
            .query_async(&mut conn)
            .await
            .unwrap();
        if exists {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the answer was not kept: {}",
            c.log_tail(0)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `n` one-call runs on the paid route, from fifty users.
fn paid_runs(n: usize) -> Vec<freeway::job::RunJob> {
    (0..n)
        .map(|i| {
            freeway::job::RunJob::new(
                request(&format!("u{}", i % 50), "hi", &[PAID]),
                freeway::clock::epoch_ms(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_backlog_past_apalis_unpack_limit_drains_once_workers_start() {
    let Some(mut c) = Cluster::start("backlog", sim::SimConfig::default()).await else {
        return;
    };
    // Everything is due at once before any worker runs: the apalis-redis 1.0.0 trap, whose
    // promotion script fails from 8,000 due entries on (Lua's `unpack` limit). 10,000 is past it
    // with a margin; more only makes the test longer.
    const RUNS: usize = 10_000;
    let jobs = paid_runs(RUNS);
    c.queue.push(&jobs).await.unwrap();
    let started = std::time::Instant::now();
    c.spawn_worker(&["--concurrency", "256", "--heartbeat-s", "5"]);
    c.spawn_worker(&["--concurrency", "256", "--heartbeat-s", "5"]);
    c.watch_queue(Duration::from_secs(600), |d| d.done >= RUNS as u64)
        .await;
    eprintln!("{RUNS} runs drained in {:?}", started.elapsed());
    let last = c.store.run(&jobs[RUNS - 1].run_id).await.unwrap().unwrap();
    assert_eq!(last.status, freeway::run::RunStatus::Succeeded);
    c.assert_budgets(&jobs).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn thousands_of_snoozed_runs_waking_at_once_do_not_stall_the_queue() {
    let Some(mut c) = Cluster::start("wake", sim::SimConfig::default()).await else {
        return;
    };
    // The paid route rests for 10 s: the runs snooze until about the same moment.
    let paid = freeway::route::Route::parse(PAID, &Catalog::builtin()).unwrap();
    let scope = RestScope::Route {
        pool: None,
        route_key: paid.key(),
    };
    rests(&c)
        .write(&scope, RestLength::For(10_000), "test rest")
        .await
        .unwrap();
    let jobs: Vec<_> = (0..3_000)
        .map(|i| {
            let mut req = request(&format!("u{}", i % 40), "hi", &[PAID]);
            req.on_rest = Some(freeway::job::OnRest::Queue);
            freeway::job::RunJob::new(req, freeway::clock::epoch_ms())
        })
        .collect();
    c.queue.push(&jobs).await.unwrap();
    // A heartbeat that a loaded debug build can keep: a replica presumed dead while it is only
    // slow would have its runs re-run after their calls (still within budget, but not one call).
    c.spawn_worker(&["--concurrency", "256", "--heartbeat-s", "5"]);
    c.spawn_worker(&["--concurrency", "256", "--heartbeat-s", "5"]);
    let mut saw_snoozed = 0;
    c.watch_queue(Duration::from_secs(300), |d| {
        saw_snoozed = saw_snoozed.max(d.delayed);
        let idle = d.waiting + d.scheduled + d.delayed + d.running == 0;
        idle && c.sim.calls().len() >= 3_000
    })
    .await;
    assert!(
        saw_snoozed > 1_000,
        "most runs were parked at once: {saw_snoozed}"
    );
    let mut woke = 0;
    for job in &jobs {
        let rec = c.store.run(&job.run_id).await.unwrap().unwrap();
        assert_eq!(rec.status, freeway::run::RunStatus::Succeeded);
        let attempts = c.store.attempts(&job.run_id).await.unwrap();
        assert_eq!(
            rec.state.counters.calls, 1,
            "no call into the resting route: {rec:?} {attempts:?}"
        );
        woke += usize::from(rec.state.snoozes > 0);
    }
    assert!(woke > 1_000, "delayed, then completed: {woke}");
    assert_eq!(c.sim.calls().len(), 3_000, "one call per run");
    c.assert_budgets(&jobs).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_lets_the_running_run_finish_then_exits_cleanly() {
    let Some(mut c) = Cluster::start("sigterm", sim::SimConfig::default()).await else {
        return;
    };
    // The call takes 2 s: SIGTERM arrives while it is in flight.
    let mut slow = sim::FaultSpec::new(sim::FaultKind::Timeout);
    slow.delay_ms = Some(2_000);
    c.sim.inject(slow);
    let n = c.spawn_worker(&[]);
    let job = c.enqueue(request("u1", "finish me", &[PAID])).await;
    c.wait_for(&job.run_id, WAIT, |e| e["type"] == "attempt")
        .await;
    let pid = c.workers[n].id().to_string();
    assert!(
        std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let events = c.wait(&job.run_id, WAIT).await;
    assert_eq!(
        last(&events)["status"],
        "succeeded",
        "the running run finished: {events:?}"
    );
    let status = tokio::task::block_in_place(|| c.workers[n].wait()).unwrap();
    assert!(
        status.success(),
        "a clean exit after SIGTERM: {status:?}\n{}",
        c.log_tail(n)
    );
    c.assert_budgets(&[job]).await;
}

/// A SIGTERM whose grace ends before the call does: the replica hands the run's lease back as it
/// exits, so another replica takes the run at once (the lease was left to expire, 30 s), and
/// the provider's call log shows one answered call: the cut call was never answered, and no
/// answer was bought twice.
#[tokio::test(flavor = "multi_thread")]
async fn sigterm_past_its_grace_hands_the_runs_lease_back() {
    let Some(mut c) = Cluster::start("sigtermgrace", sim::SimConfig::default()).await else {
        return;
    };
    let mut slow = sim::FaultSpec::new(sim::FaultKind::Timeout);
    slow.delay_ms = Some(10_000);
    c.sim.inject(slow);
    let n = c.spawn_worker(&["--grace-s", "1"]);
    let job = c.enqueue(request("u1", "cut short", &[PAID])).await;
    c.wait_for(&job.run_id, WAIT, |e| e["type"] == "attempt")
        .await;
    let pid = c.workers[n].id().to_string();
    assert!(
        std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let status = tokio::task::block_in_place(|| c.workers[n].wait()).unwrap();
    assert!(status.success(), "{status:?}\n{}", c.log_tail(n));
    let lease = format!("{}:run:{}:lease", c.ns, job.run_id);
    let mut conn = c.conn.clone();
    let held: Option<String> = redis::cmd("GET")
        .arg(&lease)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(held, None, "the lease was handed back: {}", c.log_tail(n));
    assert!(
        c.log(n).contains("handed back the leases"),
        "{}",
        c.log_tail(n)
    );
    let next = c.spawn_worker(&[]);
    let started = std::time::Instant::now();
    let events = c.wait(&job.run_id, WAIT).await;
    let took = started.elapsed();
    eprintln!("sigterm past grace: the next replica finished the run in {took:?}");
    assert!(
        took < freeway::lease::LEASE_TTL / 2,
        "taken without waiting for the lease to expire: {took:?}"
    );
    assert_eq!(last(&events)["status"], "succeeded", "{}", c.log_tail(next));
    let answered = c
        .sim
        .calls()
        .iter()
        .filter(|call| call.variant == "ok")
        .count();
    assert_eq!(answered, 1, "one answered call: {:?}", c.sim.calls());
    c.assert_budgets(&[job]).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_spent_day_delays_runs_until_a_top_up_the_key_endpoint_shows_wakes_them() {
    let now = freeway::clock::epoch_ms();
    let to_midnight = freeway::day::next_midnight_ms(chrono_tz::UTC, now) - now;
    if to_midnight < 10 * 60_000 {
        // A day rest this close to midnight is shorter than the pool cap: the watch never
        // reads for it, and the run wakes at midnight anyway.
        eprintln!("skipped: {to_midnight} ms to UTC midnight");
        return;
    }
    let config = sim::SimConfig {
        rpd: 1,
        ..Default::default()
    };
    let Some(mut c) = Cluster::start("day", config).await else {
        return;
    };
    // Learning off: the day is closed by the provider's refusal or by the watch's read (below),
    // not also by the first answer's headers.
    c.spawn_worker_with(
        &["--quota-check-s", "1"],
        &[("FREEWAY_LEARN_LIMITS", "off")],
    );
    let spends_the_day = c.enqueue(request("u1", "hi", &[FREE_A])).await;
    let events = c.wait(&spends_the_day.run_id, WAIT).await;
    assert_eq!(last(&events)["status"], "succeeded", "{events:?}");

    let mut req = request("u2", "hi", &[FREE_A]);
    req.deadline_s = Some(freeway::job::MAX_DEADLINE_S);
    let delayed = c.enqueue(req).await;
    let events = c
        .wait_for(&delayed.run_id, WAIT, |e| e["type"] == "delayed")
        .await;
    let until_ms = last(&events)["until_ms"].as_u64().unwrap();
    let midnight = freeway::day::next_midnight_ms(chrono_tz::UTC, freeway::clock::epoch_ms());
    assert!(
        until_ms >= midnight && until_ms <= midnight + 2_000,
        "delayed until UTC midnight: {until_ms} vs {midnight}"
    );
    let key = rests(&c)
        .key_for(&RestScope::Pool(OPENROUTER_FREE_POOL.into()))
        .unwrap();
    let mut conn = c.conn.clone();
    let pttl: i64 = redis::cmd("PTTL")
        .arg(&key)
        .query_async(&mut conn)
        .await
        .unwrap();
    let to_midnight = midnight - freeway::clock::epoch_ms();
    // The day closes one of two ways, as the watch's first read falls: the second run's call is
    // refused (a pool rest until midnight), or the watch read the spent day first and the pool's
    // limiter holds the run without a call. Either way it waits for midnight.
    let refused = pttl > 0;
    if refused {
        assert!(
            (pttl as u64).abs_diff(to_midnight) < 5_000,
            "the pool rests until midnight: {pttl} ms, midnight in {to_midnight} ms"
        );
    }
    let calls = if refused { 2 } else { 1 };

    // The watch reads the key once a second; the day is spent, so the day stays closed.
    c.sim_until(WAIT, |sim| sim.key_reads() >= 2).await;
    assert_eq!(c.chat_calls(), calls, "no chat call probed the closed day");
    if refused {
        let pttl: i64 = redis::cmd("PTTL")
            .arg(&key)
            .query_async(&mut conn)
            .await
            .unwrap();
        assert!(pttl > 300_000, "{pttl}");
    }

    c.sim
        .patch_config(&sim::ConfigPatch {
            high_balance: Some(true),
            ..Default::default()
        })
        .unwrap();
    let events = c.wait(&delayed.run_id, WAIT).await;
    assert_eq!(last(&events)["status"], "succeeded", "{events:?}");
    assert!(
        freeway::clock::epoch_ms() < until_ms,
        "woken by the lift, not by its wake time"
    );
    let exists: bool = redis::cmd("EXISTS")
        .arg(&key)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(!exists, "the day rest was lifted");
    assert!(
        c.log(0)
            .contains("the quota endpoint shows requests left today"),
        "{}",
        c.log_tail(0)
    );
    c.assert_budgets(&[spends_the_day, delayed]).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn ten_replicas_never_call_a_declared_pool_past_its_limit_in_any_window() {
    const RPM: u32 = 5;
    const WINDOW_S: u64 = 2;
    let config = sim::SimConfig {
        rpm: RPM,
        window_s: WINDOW_S,
        ..Default::default()
    };
    let Some(mut c) = Cluster::start("pace", config).await else {
        return;
    };
    let file = c.dir.join("freeway.toml");
    let declared = format!("[pools.openrouter-free]\nrpm = {RPM}\nwindow_s = {WINDOW_S}\n");
    std::fs::write(&file, declared).unwrap();
    let file = file.to_str().unwrap().to_string();
    for _ in 0..10 {
        c.spawn_worker_with(&["--concurrency", "8"], &[("FREEWAY_CONFIG", &file)]);
    }
    let mut runs = Vec::new();
    for n in 0..30 {
        let mut req = request(&format!("u{n}"), "hi", &[FREE_A, FREE_B]);
        req.deadline_s = Some(120);
        runs.push(c.enqueue(req).await);
    }
    for run in &runs {
        let events = c.wait(&run.run_id, Duration::from_secs(60)).await;
        assert_eq!(last(&events)["status"], "succeeded", "{events:?}");
    }
    let calls = c.sim.calls();
    assert!(
        calls.iter().all(|r| r.status == 200),
        "not one 429: {calls:?}"
    );
    let mut per_window = std::collections::BTreeMap::<u64, u32>::new();
    for call in &calls {
        *per_window.entry(call.t_ms / (WINDOW_S * 1000)).or_default() += 1;
    }
    assert!(per_window.values().all(|&n| n <= RPM), "{per_window:?}");
    assert_eq!(calls.len(), 30, "one call a run");
    // 30 calls at 5 a window need at least 6 windows: every one of them was used to the full.
    assert!(per_window.len() >= 6, "{per_window:?}");
    c.assert_budgets(&runs).await;
}

/// docs/design.md §4.7 on real processes: one tenant's batch fills a pool's queue; another
/// tenant's runs that come a window later are handed the next slots, ahead of the batch, by
/// the replicas' housekeeping (no run waits for the batch to drain).
#[tokio::test(flavor = "multi_thread")]
async fn three_replicas_serve_a_later_tenant_ahead_of_anothers_batch() {
    const RPM: u32 = 4;
    const WINDOW_S: u64 = 2;
    let config = sim::SimConfig {
        rpm: RPM,
        window_s: WINDOW_S,
        ..Default::default()
    };
    let Some(mut c) = Cluster::start("fair", config).await else {
        return;
    };
    let file = c.dir.join("freeway.toml");
    let declared = format!("[pools.openrouter-free]\nrpm = {RPM}\nwindow_s = {WINDOW_S}\n");
    std::fs::write(&file, declared).unwrap();
    let file = file.to_str().unwrap().to_string();
    for _ in 0..3 {
        c.spawn_worker_with(&["--concurrency", "16"], &[("FREEWAY_CONFIG", &file)]);
    }
    let mut batch = Vec::new();
    for n in 0..24 {
        let mut req = request(&format!("a{n}"), "hi", &[FREE_A]);
        req.tenant = Some("acme".into());
        req.priority = Some(freeway::job::Priority::Batch);
        req.deadline_s = Some(300);
        batch.push(c.enqueue(req).await);
    }
    // A window later (its first calls made), the other tenant asks.
    c.sim_until(WAIT, |sim| sim.calls().len() >= RPM as usize)
        .await;
    let mut later = Vec::new();
    for n in 0..2 {
        let mut req = request(&format!("b{n}"), "hi", &[FREE_A]);
        req.tenant = Some("globex".into());
        req.on_rest = Some(freeway::job::OnRest::Queue);
        req.deadline_s = Some(300);
        later.push(c.enqueue(req).await);
    }
    for run in &later {
        let events = c.wait(&run.run_id, Duration::from_secs(60)).await;
        assert_eq!(last(&events)["status"], "succeeded", "{events:?}");
    }
    // When the later tenant's runs are done, most of the batch still waits.
    let mut done = 0;
    for run in &batch {
        let rec = c.store.run(&run.run_id).await.unwrap().unwrap();
        if rec.status == freeway::run::RunStatus::Succeeded {
            done += 1;
        }
    }
    assert!(done <= 16, "{done} of the batch's 24 went first");
    for run in &batch {
        let events = c.wait(&run.run_id, Duration::from_secs(90)).await;
        assert_eq!(last(&events)["status"], "succeeded", "{events:?}");
    }
    let calls = c.sim.calls();
    assert!(calls.iter().all(|r| r.status == 200), "not one 429");
    assert_eq!(calls.len(), 26, "one call a run");
    batch.extend(later);
    c.assert_budgets(&batch).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn three_replicas_send_one_canary_per_period_for_the_fleet() {
    const PERIOD_MS: u64 = 2_000;
    let Some(mut c) = Cluster::start("canary", sim::SimConfig::default()).await else {
        return;
    };
    let file = c.dir.join("freeway.toml");
    std::fs::write(&file, "[pools.openrouter-free]\ncanary_every = \"2s\"\n").unwrap();
    let file = file.to_str().unwrap().to_string();
    for _ in 0..3 {
        c.spawn_worker_with(&[], &[("FREEWAY_CONFIG", &file)]);
    }
    c.sim_until(Duration::from_secs(30), |sim| sim.calls().len() >= 2)
        .await;
    let calls = c.sim.calls();
    assert!(
        calls
            .iter()
            .all(|r| r.model == "openrouter/free" && r.max_tokens == Some(1)),
        "only canaries: {calls:?}"
    );
    // Three replicas sending their own would land within one round (a quarter period) of each
    // other; the fleet's canaries are a period apart.
    let gap = calls[1].t_ms - calls[0].t_ms;
    assert!(
        gap >= PERIOD_MS - 100,
        "one canary per period, {gap} ms apart: {calls:?}"
    );
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        use freeway::store::Store;
        let stored = c.store.last_canaries().await.unwrap();
        if stored
            .first()
            .is_some_and(|s| s.attempt.t_ms >= calls[1].t_ms - 50)
        {
            assert_eq!(stored.len(), 1, "one provider");
            assert_eq!(stored[0].attempt.http_status, Some(200));
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the canary was not stored: {stored:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// docs/design.md §4.3: a replica holds its running runs plus one fetch batch at most, so a replica
/// started while another drains a backlog finds work for every slot it has. docs/design.md §4.3,
/// `FREEWAY_QUEUES`: runs spread over three queue names by id, parked and woken in their own lane,
/// every lane consumed by every replica, each run ending once with one call. On a cluster the lanes
/// lie on different slots, and apalis's worker registration (which writes a key outside a lane's
/// slot) still succeeds on each.
#[tokio::test(flavor = "multi_thread")]
async fn runs_spread_over_three_queue_names_each_end_once() {
    const LANES: usize = 3;
    let Some(mut c) = Cluster::start("lanes", sim::SimConfig::default()).await else {
        return;
    };
    c.queue = c.queue.clone().with_lanes(LANES);
    let paid = freeway::route::Route::parse(PAID, &Catalog::builtin()).unwrap();
    let scope = RestScope::Route {
        pool: None,
        route_key: paid.key(),
    };
    rests(&c)
        .write(&scope, RestLength::For(2_000), "test rest")
        .await
        .unwrap();
    let jobs: Vec<_> = (0..300)
        .map(|i| {
            let mut req = request(&format!("u{}", i % 30), "hi", &[PAID]);
            req.on_rest = Some(freeway::job::OnRest::Queue);
            freeway::job::RunJob::new(req, freeway::clock::epoch_ms())
        })
        .collect();
    c.queue.push(&jobs).await.unwrap();
    let lanes: Vec<String> = c.queue.lane_names().map(str::to_string).collect();
    let cfg = |lane: &str| queue::schedule::storage_config(lane, 1, Duration::from_secs(1));
    let mut waiting = Vec::new();
    for lane in &lanes {
        let n: u64 = redis::cmd("LLEN")
            .arg(cfg(lane).active_jobs_list())
            .query_async(&mut c.conn.clone())
            .await
            .unwrap();
        waiting.push(n);
    }
    assert_eq!(waiting.iter().sum::<u64>(), 300);
    assert!(
        waiting.iter().all(|&n| n >= 50),
        "every lane has its share of the runs: {waiting:?}"
    );
    let env = [("FREEWAY_QUEUES", "3")];
    c.spawn_worker_with(&["--concurrency", "16"], &env);
    c.spawn_worker_with(&["--concurrency", "16"], &env);
    let mut saw_delayed = 0;
    c.watch_queue(Duration::from_secs(120), |d| {
        saw_delayed = saw_delayed.max(d.delayed);
        let idle = d.waiting + d.scheduled + d.delayed + d.running == 0;
        idle && c.sim.calls().len() >= 300
    })
    .await;
    assert!(saw_delayed > 0, "runs parked while the route rested");
    for lane in &lanes {
        let (done, workers): (u64, u64) = redis::pipe()
            .scard(cfg(lane).done_jobs_set())
            .zcard(cfg(lane).workers_set())
            .query_async(&mut c.conn.clone())
            .await
            .unwrap();
        assert!(done >= 50, "lane {lane} delivered its runs: {done}");
        assert_eq!(workers, 2, "both replicas consume lane {lane}");
    }
    let (_, replicas) = c.queue.snapshot().await.unwrap();
    assert_eq!(replicas.len(), 2, "one replica a process: {replicas:?}");
    let mut woke = 0;
    for job in &jobs {
        let rec = c.store.run(&job.run_id).await.unwrap().unwrap();
        assert_eq!(rec.status, freeway::run::RunStatus::Succeeded, "{rec:?}");
        assert_eq!(rec.state.counters.calls, 1, "{rec:?}");
        woke += usize::from(rec.state.snoozes > 0);
    }
    assert!(woke > 0, "parked runs woke in their lane and completed");
    assert_eq!(c.chat_calls(), 300, "one call a run");
    c.assert_budgets(&jobs).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_replica_holds_no_more_than_its_concurrency_and_one_fetch_batch() {
    const CONCURRENCY: u64 = 40;
    let Some(mut c) = Cluster::start(
        "claims",
        sim::SimConfig {
            latency_ms: 100,
            ..Default::default()
        },
    )
    .await
    else {
        return;
    };
    let jobs = paid_runs(1_500);
    c.queue.push(&jobs).await.unwrap();
    let concurrency = CONCURRENCY.to_string();
    c.spawn_worker(&["--concurrency", &concurrency]);
    let bound = CONCURRENCY + queue::schedule::FETCH_BATCH as u64;
    let mut held: std::collections::BTreeMap<String, u64> = Default::default();
    let mut second_started = false;
    loop {
        let (depths, replicas) = c.queue.snapshot().await.unwrap();
        for r in &replicas {
            let claimed = match r.running > bound {
                true => unsettled_claims(&c, &r.name).await,
                false => r.running,
            };
            let most = held.entry(r.name.clone()).or_default();
            *most = (*most).max(claimed);
        }
        // The second replica starts once the first is draining the backlog.
        if !second_started && depths.done > 0 {
            c.spawn_worker(&["--concurrency", &concurrency]);
            second_started = true;
        }
        if depths.done >= jobs.len() as u64 {
            break;
        }
        for n in 0..c.workers.len() {
            let alive = support::is_running(c.workers[n].id());
            assert!(alive, "worker {n} died: {}", c.log_tail(n));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(held.len(), 2, "both replicas took runs: {held:?}");
    for (name, most) in &held {
        assert!(
            *most <= bound,
            "{name} held {most} runs at once, more than its {CONCURRENCY} slots and one batch"
        );
    }
    assert!(
        held.values().all(|most| *most >= CONCURRENCY),
        "the later replica filled its slots from the backlog: {held:?}"
    );
    c.assert_budgets(&jobs).await;
}

/// docs/design.md §2.5: once a run's events have outlived `FREEWAY_EVENTS_KEEP_S` and its
/// delivery's apalis records their keep (what a replica's vacuum does minutes after a run
/// finished), Redis keeps under 1 KB of it, counting every key of the namespace.
#[tokio::test(flavor = "multi_thread")]
async fn once_runs_are_kept_long_enough_redis_keeps_under_a_kilobyte_of_each() {
    const RUNS: usize = 300;
    let Some(mut c) = Cluster::start("bytes", sim::SimConfig::default()).await else {
        return;
    };
    let enqueuer =
        queue::Enqueuer::new(c.conn.clone(), &c.ns, std::sync::Arc::new(c.store.clone()));
    let mut ids = Vec::new();
    for i in 0..RUNS {
        let mut req = request(&format!("u{}", i % 20), "Say something, please.", &[PAID]);
        req.idempotency_key = Some(format!("k{i}"));
        match enqueuer.enqueue(req).await.unwrap() {
            queue::Outcome::Enqueued { run_id } => ids.push(run_id),
            other => panic!("not enqueued: {other:?}"),
        }
    }
    c.spawn_worker_with(&["--concurrency", "32"], &[("FREEWAY_EVENTS_KEEP_S", "1")]);
    c.watch_queue(Duration::from_secs(60), |d| d.done >= RUNS as u64)
        .await;
    let mut conn = c.conn.clone();
    // The streams lapse a second after each run's last event.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !keys(&mut conn, &format!("{}:*run:*:events", c.ns))
        .await
        .is_empty()
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "event streams outlived their keep"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let unvacuumed = namespace_bytes(&mut conn, &c.ns).await / RUNS as u64;
    // The vacuum a replica runs once the deliveries' keep is over.
    let later = freeway::clock::epoch_ms() + queue::schedule::KEEP_DELIVERED.as_millis() as u64;
    let vacuumed = c.queue.vacuum(later, 100_000).await.unwrap();
    assert_eq!(vacuumed, RUNS, "every delivery was retired");
    let per_run = namespace_bytes(&mut conn, &c.ns).await / RUNS as u64;
    eprintln!(
        "Redis keeps {per_run} bytes a finished run ({unvacuumed} before apalis's records of \
         its delivery are vacuumed)"
    );
    assert!(
        per_run <= 1024,
        "Redis keeps {per_run} bytes a finished run"
    );
    // What Redis let go of, the store still answers: the output and a retry's job.
    let run = c.store.run(&ids[0]).await.unwrap().unwrap();
    assert_eq!(run.status, freeway::run::RunStatus::Succeeded);
    assert!(enqueuer.job(&ids[0]).await.unwrap().is_some());
}

/// How many of the jobs `replica` has claimed belong to runs not settled yet: apalis drops a
/// finished job from a replica's claimed set when it flushes its acknowledgements, a moment
/// after the run settled, and such a job is no longer held back from anyone.
async fn unsettled_claims(c: &Cluster, replica: &str) -> u64 {
    let q = c.queue.name();
    let mut conn = c.conn.clone();
    let ids: Vec<String> = redis::cmd("SMEMBERS")
        .arg(format!("{q}:inflight:{replica}"))
        .query_async(&mut conn)
        .await
        .unwrap();
    if ids.is_empty() {
        return 0;
    }
    let payloads: Vec<Option<Vec<u8>>> = redis::cmd("HMGET")
        .arg(format!("{q}:data"))
        .arg(&ids)
        .query_async(&mut conn)
        .await
        .unwrap();
    let mut unsettled = 0;
    for payload in payloads.into_iter().flatten() {
        let job: serde_json::Value = serde_json::from_slice(&payload).unwrap();
        let run_id = job["run_id"].as_str().unwrap();
        let run = c.store.run(run_id).await.unwrap();
        if !run.is_some_and(|r| r.status.is_settled()) {
            unsettled += 1;
        }
    }
    unsettled
}

/// `MEMORY USAGE` summed over every key of the namespace (on a cluster the queue's keys start
/// with their hash tag, before the namespace).
async fn namespace_bytes(conn: &mut freeway::connect::RedisConnection, ns: &str) -> u64 {
    let mut bytes = 0;
    for key in keys(conn, &format!("*{ns}:*")).await {
        let used: Option<u64> = redis::cmd("MEMORY")
            .arg("USAGE")
            .arg(&key)
            .query_async(conn)
            .await
            .unwrap();
        bytes += used.unwrap_or(0);
    }
    bytes
}

/// The keys that match `pattern`, on every primary of a cluster too (`KEYS`: a test's Redis is
/// small).
async fn keys(conn: &mut freeway::connect::RedisConnection, pattern: &str) -> Vec<String> {
    redis::cmd("KEYS")
        .arg(pattern)
        .query_async(conn)
        .await
        .unwrap()
}

/// A retired delivery's apalis records go once apalis has marked it finished, and not before:
/// the vacuum never deletes a job a replica may still be executing or acknowledging.
#[tokio::test(flavor = "multi_thread")]
async fn the_vacuum_deletes_a_retired_delivery_only_once_apalis_marked_it_finished() {
    let Some(c) = Cluster::start("vacuum", sim::SimConfig::default()).await else {
        return;
    };
    c.queue.push(&paid_runs(1)).await.unwrap();
    let q = c.queue.name();
    let mut conn = c.conn.clone();
    let ids: Vec<String> = redis::cmd("HKEYS")
        .arg(format!("{q}:data"))
        .query_async(&mut conn)
        .await
        .unwrap();
    let [id] = ids.as_slice() else {
        panic!("one delivery pushed: {ids:?}")
    };
    c.queue.retire(0, id, Duration::ZERO).await.unwrap();
    let now = freeway::clock::epoch_ms() + 1;
    assert_eq!(
        c.queue.vacuum(now, 100).await.unwrap(),
        0,
        "not finished yet"
    );
    let kept: bool = redis::cmd("HEXISTS")
        .arg(format!("{q}:data"))
        .arg(id)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(kept, "an unfinished delivery keeps its payload");
    // What apalis's acknowledgement writes.
    redis::pipe()
        .hset(format!("{q}:meta:{id}"), "status", "Done")
        .ignore()
        .sadd(format!("{q}:done"), id)
        .ignore()
        .query_async::<()>(&mut conn)
        .await
        .unwrap();
    assert_eq!(
        c.queue.vacuum(now, 100).await.unwrap(),
        0,
        "an unfinished delivery is looked at again a minute later"
    );
    assert_eq!(c.queue.vacuum(now + 60_000, 100).await.unwrap(), 1);
    let (data, meta, done): (bool, bool, bool) = redis::pipe()
        .hexists(format!("{q}:data"), id)
        .exists(format!("{q}:meta:{id}"))
        .sismember(format!("{q}:done"), id)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!((data, meta, done), (false, false, false));
}
