//! The store's contract (docs/design.md §7, issue 4), one suite for both backends: every test runs
//! on a fresh SQLite file and, when `PG_URL` is set (`scripts/test.sh` starts a private server), on
//! a fresh PostgreSQL database. Without `PG_URL` the PostgreSQL half is skipped, loudly.
//!
//! Engine tests run the real [`Engine`] on the SQL store, the in-process fleet and a fake provider
//! or the simulator; the one that checks where a user's key may end up also uses a real Redis
//! (`REDIS_URL`).

mod support;

use async_trait::async_trait;
use freeway::budget::{Counters, Kind};
use freeway::chat::{Message, ToolCall, ToolSpec, Usage};
use freeway::classify::{RestLength, RestScope, Verdict};
use freeway::clock::{InstantClock, epoch_ms};
use freeway::engine::{Engine, Outcome, WhenResting};
use freeway::events::{Event, MemoryEvents};
use freeway::fleet::Fleet;
use freeway::headers::Headers;
use freeway::job::{RunJob, RunRequest};
use freeway::provider::{
    ApiKey, CallError, ChatProvider, ChatRequest, Completion, EnvTargets, HttpProvider, Target,
    TargetError, Targets, Timeouts,
};
use freeway::rest::{MemoryRests, Rests};
use freeway::route::{OPENROUTER_FREE_POOL, Route, RouteSpec};
use freeway::run::{
    ApprovalRecord, AttemptRecord, Code, Decided, Decision, RunRecord, RunState, RunStatus,
};
use freeway::store::{
    Attached, Backend, MemoryStore, NewConnection, SecretKey, SecretKeys, SqlStore, Store,
    StoreError, StoreTargets,
};
use sqlx::{Connection, Row};
use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc::UnboundedSender;

const SECRET_HEX: &str = "6b1f0c5e3a9d2e8f7c4b1a0d9e8f7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c2d1e0f";

/// One fresh database of one backend, removed by [`TestDb::finish`].
struct TestDb {
    store: SqlStore,
    url: String,
    label: &'static str,
    cleanup: Cleanup,
}

enum Cleanup {
    Dir(PathBuf),
    PgDatabase(String),
}

fn pg_url() -> Option<String> {
    std::env::var("PG_URL").ok().filter(|u| !u.is_empty())
}

fn unique(prefix: &str) -> String {
    format!(
        "{prefix}_{}",
        ulid::Ulid::generate().to_string().to_lowercase()
    )
}

/// Said once per run, straight to stderr so the test harness does not swallow it.
fn warn_pg_skipped() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "\n*** PG_URL is not set: the PostgreSQL half of store_suite is SKIPPED (scripts/test.sh sets it) ***\n"
        );
    });
}

/// A fresh SQLite file and, with `PG_URL`, a fresh PostgreSQL database; neither opened yet.
async fn fresh_urls(test: &str) -> Vec<(&'static str, String, Cleanup)> {
    let dir = std::env::temp_dir().join(unique(&format!("freeway-store-{test}")));
    std::fs::create_dir_all(&dir).expect("a temp dir");
    let mut urls = vec![(
        "sqlite",
        format!("sqlite://{}", dir.join("freeway.db").display()),
        Cleanup::Dir(dir),
    )];
    match pg_url() {
        Some(admin) => {
            let name = unique("freeway_t");
            let mut conn = sqlx::PgConnection::connect(&admin)
                .await
                .expect("PG_URL is reachable");
            sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
                .execute(&mut conn)
                .await
                .expect("create a database");
            conn.close().await.expect("close");
            let base = admin
                .split('?')
                .next()
                .and_then(|u| u.rsplit_once('/'))
                .map(|(b, _)| b.to_string())
                .expect("PG_URL ends in /DATABASE");
            urls.push((
                "postgres",
                format!("{base}/{name}"),
                Cleanup::PgDatabase(name),
            ));
        }
        None => warn_pg_skipped(),
    }
    urls
}

/// A fresh, opened database of each backend.
async fn fresh(test: &str) -> Vec<TestDb> {
    let mut dbs = Vec::new();
    for (label, url, cleanup) in fresh_urls(test).await {
        let store = SqlStore::open(&url)
            .await
            .unwrap_or_else(|e| panic!("{label}: open {url}: {e}"));
        dbs.push(TestDb {
            store,
            url,
            label,
            cleanup,
        });
    }
    dbs
}

impl TestDb {
    async fn finish(self) {
        self.store.close().await;
        drop_database(self.cleanup).await;
    }

    /// Every byte of the SQLite database files (the main file, the WAL and its index).
    fn sqlite_bytes(&self) -> Vec<u8> {
        let Cleanup::Dir(dir) = &self.cleanup else {
            return vec![];
        };
        let mut bytes = Vec::new();
        for name in ["freeway.db", "freeway.db-wal", "freeway.db-shm"] {
            bytes.extend(std::fs::read(dir.join(name)).unwrap_or_default());
        }
        bytes
    }

    /// Every row of `table` as text (PostgreSQL), for looking for a secret.
    async fn pg_rows(&self, table: &str) -> String {
        let mut conn = sqlx::PgConnection::connect(&self.url)
            .await
            .expect("connect");
        let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT t::text AS row FROM {table} t"
        )))
        .fetch_all(&mut conn)
        .await
        .expect("select");
        rows.iter()
            .map(|r| r.get::<String, _>("row"))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

async fn drop_database(cleanup: Cleanup) {
    match cleanup {
        Cleanup::Dir(dir) => {
            let _ = std::fs::remove_dir_all(dir);
        }
        Cleanup::PgDatabase(name) => {
            let admin = pg_url().expect("PG_URL");
            let mut conn = sqlx::PgConnection::connect(&admin).await.expect("connect");
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
            )))
            .execute(&mut conn)
            .await
            .expect("drop the test database");
        }
    }
}

fn record(run_id: &str, conversation_id: &str) -> RunRecord {
    let now = epoch_ms();
    RunRecord {
        run_id: run_id.into(),
        user_id: "u1".into(),
        conversation_id: conversation_id.into(),
        kind: Kind::Chat,
        routes: vec![RouteSpec {
            model: "vendor/m:free".into(),
            connection: None,
            provider: None,
        }],
        parent_run_id: None,
        idempotency_key: None,
        status: RunStatus::Queued,
        code: None,
        state: RunState::default(),
        output: String::new(),
        incomplete: false,
        usage: Usage::default(),
        pending_tool_call: None,
        summary: None,
        created_ms: now,
        updated_ms: now,
        deadline_ms: now + 600_000,
    }
}

fn call(id: &str) -> ToolCall {
    ToolCall {
        id: id.into(),
        name: "lookup".into(),
        arguments: r#"{"q":"x"}"#.into(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrations_are_idempotent() {
    for db in fresh("idempotent").await {
        let applied = db.store.applied_migrations().await.unwrap();
        let again = SqlStore::open(&db.url)
            .await
            .unwrap_or_else(|e| panic!("{}: a second open: {e}", db.label));
        let third = SqlStore::open(&db.url)
            .await
            .unwrap_or_else(|e| panic!("{}: a third open: {e}", db.label));
        assert_eq!(
            again.applied_migrations().await.unwrap(),
            applied,
            "{}",
            db.label
        );
        let expected: Vec<(i64, bool)> = freeway::store::MIGRATIONS
            .iter()
            .map(|m| (m.0, true))
            .collect();
        assert_eq!(
            applied, expected,
            "{}: every migration applied once",
            db.label
        );
        third
            .create_run(&record(&unique("run"), &unique("conv")))
            .await
            .unwrap();
        again.close().await;
        third.close().await;
        db.finish().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_start_ups_apply_each_migration_once() {
    for (label, url, cleanup) in fresh_urls("concurrent").await {
        let opens: Vec<_> = (0..8)
            .map(|_| {
                let url = url.clone();
                tokio::spawn(async move { SqlStore::open(&url).await })
            })
            .collect();
        let mut stores = Vec::new();
        for open in opens {
            stores.push(
                open.await
                    .unwrap()
                    .unwrap_or_else(|e| panic!("{label}: a concurrent open failed: {e}")),
            );
        }
        let expected: Vec<(i64, bool)> = freeway::store::MIGRATIONS
            .iter()
            .map(|m| (m.0, true))
            .collect();
        for store in &stores {
            assert_eq!(
                store.applied_migrations().await.unwrap(),
                expected,
                "{label}"
            );
        }
        // Every replica writes at once: the schema is whole and shared.
        let conv = unique("conv");
        let writes = stores.iter().enumerate().map(|(i, s)| {
            let (s, conv) = (s.clone(), conv.clone());
            tokio::spawn(async move {
                s.append_message(
                    &conv,
                    &format!("run_{i}"),
                    "input",
                    &Message::user(format!("m{i}")),
                )
                .await
            })
        });
        for w in writes.collect::<Vec<_>>() {
            w.await.unwrap().unwrap_or_else(|e| panic!("{label}: {e}"));
        }
        assert_eq!(
            stores[0].transcript(&conv).await.unwrap().len(),
            8,
            "{label}"
        );
        if label == "sqlite" {
            assert!(matches!(stores[0].backend(), Backend::Sqlite));
        }
        for s in &stores {
            s.close().await;
        }
        drop_database(cleanup).await;
    }
}

#[tokio::test]
async fn create_run_is_insert_if_absent_and_keeps_the_stored_progress() {
    for db in fresh("create").await {
        let s = &db.store;
        let mut first = record(&unique("run"), &unique("conv"));
        s.create_run(&first).await.unwrap();
        assert_eq!(
            s.run(&first.run_id).await.unwrap().as_ref(),
            Some(&first),
            "{}",
            db.label
        );
        first.status = RunStatus::Running;
        first.state.counters = Counters {
            calls: 2,
            step1_attempts: 2,
            retried: true,
            steps: 1,
        };
        first.state.input_applied = true;
        s.save_run(&first).await.unwrap();
        // A second create (an enqueue retried) leaves the first one's progress alone.
        let mut again = record(&first.run_id, &first.conversation_id);
        again.created_ms += 5_000;
        s.create_run(&again).await.unwrap();
        assert_eq!(
            s.run(&first.run_id).await.unwrap(),
            Some(first.clone()),
            "{}",
            db.label
        );
        assert_eq!(s.run("run_missing").await.unwrap(), None, "{}", db.label);
        db.finish().await;
    }
}

#[tokio::test]
async fn a_conversation_belongs_to_the_user_whose_run_opened_it() {
    on_every_store("owner", check_conversation_owner).await;
}

/// Run `check` on a fresh SQLite store, PostgreSQL store (with `PG_URL`) and memory store.
async fn on_every_store(test: &str, check: impl AsyncFn(&dyn Store, &str)) {
    for db in fresh(test).await {
        check(&db.store, db.label).await;
        db.finish().await;
    }
    check(&MemoryStore::default(), "memory").await;
}

async fn check_conversation_owner(s: &dyn Store, label: &str) {
    let conv = unique("conv");
    assert_eq!(s.conversation_owner(&conv).await.unwrap(), None, "{label}");
    s.create_run(&record(&unique("run"), &conv)).await.unwrap();
    let mut other = record(&unique("run"), &conv);
    other.user_id = "u2".into();
    s.create_run(&other).await.unwrap();
    assert_eq!(
        s.conversation_owner(&conv).await.unwrap().as_deref(),
        Some("u1"),
        "{label}: the first run's user keeps it"
    );
    let pushed = unique("conv");
    s.append_message(&pushed, "run_pushed", "input", &Message::user("hi"))
        .await
        .unwrap();
    assert_eq!(
        s.conversation_owner(&pushed).await.unwrap(),
        None,
        "{label}: a conversation opened by a worker alone has no owner"
    );
}

#[tokio::test]
async fn save_run_overwrites_every_mutable_field_and_counters_survive_a_snooze() {
    for db in fresh("save").await {
        let s = &db.store;
        let mut r = record(&unique("run"), &unique("conv"));
        r.kind = Kind::Research;
        r.parent_run_id = Some("run_parent".into());
        r.idempotency_key = Some("idem-1".into());
        r.routes.push(RouteSpec {
            model: "m2".into(),
            connection: Some("conn_1".into()),
            provider: Some("groq".into()),
        });
        s.create_run(&r).await.unwrap();
        r.status = RunStatus::Delayed;
        r.state = RunState {
            counters: Counters {
                calls: 3,
                step1_attempts: 3,
                retried: true,
                steps: 2,
            },
            route_index: Some(1),
            input_applied: true,
            ambiguous_stop: true,
            emitted: true,
            snoozes: 4,
        };
        r.output = "partial answer — ünïcode ✓".into();
        r.incomplete = true;
        r.usage = Usage {
            prompt_tokens: 11,
            completion_tokens: 22,
            total_tokens: 33,
        };
        r.summary = Some("a summary".into());
        r.updated_ms += 1;
        s.save_run(&r).await.unwrap();
        assert_eq!(
            s.run(&r.run_id).await.unwrap().as_ref(),
            Some(&r),
            "{}: a snoozed run keeps its counters",
            db.label
        );
        r.status = RunStatus::Failed;
        r.code = Some(Code::RateLimited);
        r.pending_tool_call = Some(call("call_1"));
        r.summary = None;
        s.save_run(&r).await.unwrap();
        assert_eq!(
            s.run(&r.run_id).await.unwrap().as_ref(),
            Some(&r),
            "{}",
            db.label
        );
        db.finish().await;
    }
}

#[tokio::test]
async fn append_message_is_idempotent_per_run_and_key_and_keeps_order() {
    for db in fresh("append").await {
        let s = &db.store;
        let conv = unique("conv");
        s.append_message(&conv, "run_a", "input", &Message::user("first"))
            .await
            .unwrap();
        s.append_message(
            &conv,
            "run_a",
            "step-1",
            &Message::assistant(Some("answer".into()), vec![]),
        )
        .await
        .unwrap();
        s.append_message(
            &conv,
            "run_a",
            "input",
            &Message::user("first, delivered again"),
        )
        .await
        .unwrap();
        s.append_message(&conv, "run_b", "input", &Message::user("second"))
            .await
            .unwrap();
        s.append_message(
            &conv,
            "run_a",
            "step-1",
            &Message::assistant(Some("again".into()), vec![]),
        )
        .await
        .unwrap();
        let texts: Vec<Option<String>> = s
            .transcript(&conv)
            .await
            .unwrap()
            .into_iter()
            .map(|m| m.content)
            .collect();
        assert_eq!(
            texts,
            vec![
                Some("first".into()),
                Some("answer".into()),
                Some("second".into())
            ],
            "{}",
            db.label
        );
        assert!(s.transcript("conv_empty").await.unwrap().is_empty());
        db.finish().await;
    }
}

/// A successful first attempt of `run_id` on `route`.
fn ok_attempt(run_id: &str, route: &str, latency_ms: u32) -> AttemptRecord {
    AttemptRecord {
        latency_ms: u64::from(latency_ms),
        ..AttemptRecord::succeeded(run_id, 1, 1, route.into(), epoch_ms())
    }
}

/// A write the database refuses (here, a trigger refusing an attempt on route `poison`) fails
/// its own caller only: the batch it was in is retried one write at a time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_the_database_refuses_fails_only_its_own_caller() {
    for db in fresh("poison").await {
        poison_attempts(&db).await;
        let tasks: Vec<_> = (0..40u32)
            .map(|i| {
                let s = db.store.clone();
                tokio::spawn(async move {
                    let route = if i == 17 {
                        "poison"
                    } else {
                        "platform:openrouter/vendor/m"
                    };
                    let attempt = ok_attempt(&format!("run_{i}_{}", unique("p")), route, i);
                    (attempt.clone(), s.record_attempt(&attempt).await)
                })
            })
            .collect();
        for t in tasks {
            let (attempt, written) = t.await.unwrap();
            let stored = db.store.attempts(&attempt.run_id).await.unwrap();
            if attempt.route == "poison" {
                let e = written.expect_err("the poisoned write fails");
                assert!(e.to_string().contains("poisoned"), "{}: {e}", db.label);
                assert!(stored.is_empty(), "{}", db.label);
            } else {
                written.unwrap_or_else(|e| panic!("{}: {e}", db.label));
                assert_eq!(stored, vec![attempt], "{}", db.label);
            }
        }
        db.finish().await;
    }
}

/// Make the database refuse attempts on route `poison`.
async fn poison_attempts(db: &TestDb) {
    match db.label {
        "postgres" => {
            let mut conn = sqlx::PgConnection::connect(&db.url).await.unwrap();
            sqlx::raw_sql(
                "CREATE FUNCTION poison() RETURNS trigger AS $$ BEGIN \
                 IF NEW.route = 'poison' THEN RAISE EXCEPTION 'poisoned attempt'; END IF; \
                 RETURN NEW; END $$ LANGUAGE plpgsql; \
                 CREATE TRIGGER poison BEFORE INSERT ON attempts \
                 FOR EACH ROW EXECUTE FUNCTION poison();",
            )
            .execute(&mut conn)
            .await
            .unwrap();
        }
        _ => {
            let mut conn = sqlx::SqliteConnection::connect(&db.url).await.unwrap();
            sqlx::raw_sql(
                "CREATE TRIGGER poison BEFORE INSERT ON attempts WHEN NEW.route = 'poison' \
                 BEGIN SELECT RAISE(ABORT, 'poisoned attempt'); END;",
            )
            .execute(&mut conn)
            .await
            .unwrap();
        }
    }
}

/// The conversation holds exactly `n` messages, all different.
async fn assert_distinct_messages(db: &TestDb, conversation: &str, n: usize) {
    let mut texts: Vec<String> = db
        .store
        .transcript(conversation)
        .await
        .unwrap()
        .into_iter()
        .filter_map(|m| m.content)
        .collect();
    assert_eq!(texts.len(), n, "{}: {texts:?}", db.label);
    texts.sort();
    texts.dedup();
    assert_eq!(texts.len(), n, "{}", db.label);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_appends_get_distinct_places_and_duplicates_are_dropped() {
    for db in fresh("append-concurrent").await {
        let conv = unique("conv");
        let tasks: Vec<_> = (0..40)
            .map(|i| {
                let (s, conv) = (db.store.clone(), conv.clone());
                // Every message is sent twice, by two tasks.
                let run = format!("run_{}", i % 20);
                tokio::spawn(async move {
                    s.append_message(&conv, &run, "input", &Message::user(run.clone()))
                        .await
                })
            })
            .collect();
        for t in tasks {
            t.await
                .unwrap()
                .unwrap_or_else(|e| panic!("{}: {e}", db.label));
        }
        assert_distinct_messages(&db, &conv, 20).await;
        db.finish().await;
    }
}

/// The writes of many runs at once are committed together (one transaction per batch, a
/// statement per kind of write); each must land as if it had been alone, including a run created
/// twice and a run saved twice within one batch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_of_many_runs_at_once_each_land_as_if_alone() {
    for db in fresh("batch").await {
        let shared = unique("conv");
        let twice = record(&unique("run"), &unique("conv"));
        let mut tasks = Vec::new();
        for i in 0..60u32 {
            let (s, shared, twice) = (db.store.clone(), shared.clone(), twice.clone());
            tasks.push(tokio::spawn(async move {
                let mut rec = record(&format!("run_{i}_{}", unique("b")), &unique("conv"));
                s.create_run(&rec).await?;
                s.create_run(&twice).await?;
                let text = format!("message {i}");
                s.append_message(&shared, &rec.run_id, "input", &Message::user(text.clone()))
                    .await?;
                s.append_message(
                    &rec.conversation_id,
                    &rec.run_id,
                    "own",
                    &Message::user(text),
                )
                .await?;
                rec.status = RunStatus::Succeeded;
                rec.state.counters.calls = i;
                rec.output = format!("answer {i}");
                s.save_run(&rec).await?;
                let mut saved_twice = twice.clone();
                saved_twice.state.counters.calls = 7;
                s.save_run(&saved_twice).await?;
                let attempt = ok_attempt(&rec.run_id, "platform:openrouter/vendor/m:free", i);
                s.record_attempt(&attempt).await?;
                Ok::<_, freeway::store::StoreError>((rec, attempt))
            }));
        }
        let mut done = Vec::new();
        for t in tasks {
            done.push(
                t.await
                    .unwrap()
                    .unwrap_or_else(|e| panic!("{}: {e}", db.label)),
            );
        }
        let s = &db.store;
        for (rec, attempt) in &done {
            assert_eq!(
                s.run(&rec.run_id).await.unwrap().as_ref(),
                Some(rec),
                "{}",
                db.label
            );
            assert_eq!(
                s.attempts(&rec.run_id).await.unwrap(),
                vec![attempt.clone()]
            );
            let own = s.transcript(&rec.conversation_id).await.unwrap();
            assert_eq!(own.len(), 1, "{}", db.label);
        }
        assert_distinct_messages(&db, &shared, 60).await;
        let stored_twice = s.run(&twice.run_id).await.unwrap().expect("created once");
        assert_eq!(stored_twice.state.counters.calls, 7, "{}", db.label);
        db.finish().await;
    }
}

#[tokio::test]
async fn the_transcript_keeps_tool_calls_and_results_intact() {
    for db in fresh("tools").await {
        let s = &db.store;
        let conv = unique("conv");
        let messages = vec![
            Message::user("look it up"),
            Message::assistant(
                None,
                vec![
                    call("call_1"),
                    ToolCall {
                        id: "call_2".into(),
                        name: "web".into(),
                        arguments: "not json{".into(),
                    },
                ],
            ),
            Message::tool_result("call_1", "result one"),
            Message::tool_result("call_2", ""),
            Message::assistant(Some("done — ünïcode ✓ 'quoted' \"double\"".into()), vec![]),
        ];
        for (i, m) in messages.iter().enumerate() {
            s.append_message(&conv, "run_t", &format!("k{i}"), m)
                .await
                .unwrap();
        }
        assert_eq!(s.transcript(&conv).await.unwrap(), messages, "{}", db.label);
        // A NUL (which PostgreSQL refuses in text) is stored as U+FFFD on both backends.
        let nul = Message::tool_result("call_2", "a\0b");
        s.append_message(&conv, "run_t", "nul", &nul).await.unwrap();
        let last = s
            .transcript(&conv)
            .await
            .unwrap()
            .pop()
            .and_then(|m| m.content);
        assert_eq!(last.as_deref(), Some("a\u{FFFD}b"), "{}", db.label);
        db.finish().await;
    }
}

#[tokio::test]
async fn delete_last_assistant_turn_removes_everything_after_the_last_user_message() {
    for db in fresh("regenerate").await {
        let s = &db.store;
        let conv = unique("conv");
        let turn = [
            Message::user("q1"),
            Message::assistant(Some("a1".into()), vec![]),
            Message::user("q2"),
            Message::assistant(None, vec![call("call_9")]),
            Message::tool_result("call_9", "r"),
            Message::assistant(Some("a2".into()), vec![]),
        ];
        for (i, m) in turn.iter().enumerate() {
            s.append_message(&conv, "run_r", &format!("k{i}"), m)
                .await
                .unwrap();
        }
        s.delete_last_assistant_turn(&conv).await.unwrap();
        assert_eq!(
            s.transcript(&conv).await.unwrap(),
            turn[..3].to_vec(),
            "{}",
            db.label
        );
        // Nothing after the last user message: nothing to delete.
        s.delete_last_assistant_turn(&conv).await.unwrap();
        assert_eq!(s.transcript(&conv).await.unwrap().len(), 3, "{}", db.label);
        // The deleted turn's keys stay taken: a late duplicate does not bring it back.
        s.append_message(&conv, "run_r", "k5", &turn[5])
            .await
            .unwrap();
        assert_eq!(s.transcript(&conv).await.unwrap().len(), 3, "{}", db.label);
        s.append_message(
            &conv,
            "run_new",
            "step-1",
            &Message::assistant(Some("a2'".into()), vec![]),
        )
        .await
        .unwrap();
        assert_eq!(
            s.transcript(&conv)
                .await
                .unwrap()
                .last()
                .and_then(|m| m.content.clone())
                .as_deref(),
            Some("a2'")
        );
        db.finish().await;
    }
}

#[tokio::test]
async fn run_and_transcript_reads_what_run_and_transcript_read() {
    for db in fresh("run-and-transcript").await {
        let s = &db.store;
        let conv = unique("conv");
        let nothing = s.run_and_transcript("run_absent", &conv).await.unwrap();
        assert_eq!(nothing, (None, vec![]), "{}", db.label);

        let mut rec = record("run_rt", &conv);
        rec.output = "partial answer".into();
        s.create_run(&rec).await.unwrap();
        let (run, transcript) = s.run_and_transcript("run_rt", &conv).await.unwrap();
        assert_eq!(
            run.as_ref(),
            s.run("run_rt").await.unwrap().as_ref(),
            "{}",
            db.label
        );
        assert!(run.is_some() && transcript.is_empty(), "{}", db.label);

        let turn = [
            Message::user("q1"),
            Message::assistant(None, vec![call("call_1")]),
            Message::tool_result("call_1", "r"),
            Message::assistant(Some("a1".into()), vec![]),
        ];
        for (i, m) in turn.iter().enumerate() {
            s.append_message(&conv, "run_rt", &format!("k{i}"), m)
                .await
                .unwrap();
        }
        let other = unique("conv");
        s.append_message(&other, "run_other", "k0", &Message::user("elsewhere"))
            .await
            .unwrap();
        let (run, transcript) = s.run_and_transcript("run_rt", &conv).await.unwrap();
        assert_eq!(run, s.run("run_rt").await.unwrap(), "{}", db.label);
        assert_eq!(transcript, turn.to_vec(), "{}", db.label);

        s.delete_last_assistant_turn(&conv).await.unwrap();
        let (_, transcript) = s.run_and_transcript("run_rt", &conv).await.unwrap();
        assert_eq!(
            transcript,
            turn[..1].to_vec(),
            "deleted turns are left out: {}",
            db.label
        );
        let (run, transcript) = s.run_and_transcript("run_absent", &conv).await.unwrap();
        assert!(run.is_none() && transcript == turn[..1], "{}", db.label);
        db.finish().await;
    }
}

#[tokio::test]
async fn attempts_round_trip_every_field() {
    for db in fresh("attempts").await {
        let s = &db.store;
        let run_id = unique("run");
        let full = AttemptRecord {
            run_id: run_id.clone(),
            n: 1,
            step: 1,
            route: "platform:openrouter/vendor/m:free".into(),
            http_status: Some(429),
            error: Some("HTTP 429: Rate limit exceeded: free-models-per-min".into()),
            verdict: Some(Verdict::Account),
            retry_hint_ms: Some(41_000),
            ratelimit_remaining: Some(0),
            provider_name: Some("Chutes".into()),
            latency_ms: 123,
            t_ms: epoch_ms(),
        };
        let bare = AttemptRecord {
            n: 2,
            http_status: None,
            error: None,
            verdict: None,
            retry_hint_ms: None,
            ratelimit_remaining: None,
            provider_name: None,
            ..full.clone()
        };
        s.record_attempt(&bare).await.unwrap();
        // Counted as lost, then how the call ended: the later record replaces the earlier.
        let lost = AttemptRecord::lost(&run_id, 1, 1, full.route.clone(), full.t_ms);
        s.record_attempt(&lost).await.unwrap();
        assert!(
            s.attempts(&run_id).await.unwrap()[0].is_lost(),
            "{}",
            db.label
        );
        s.record_attempt(&full).await.unwrap();
        s.record_attempt(&full).await.unwrap();
        assert_eq!(
            s.attempts(&run_id).await.unwrap(),
            vec![full.clone(), bare.clone()],
            "{}",
            db.label
        );
        for verdict in [
            Verdict::Route,
            Verdict::Provider,
            Verdict::Ambiguous,
            Verdict::Billing,
            Verdict::Auth,
            Verdict::Client,
            Verdict::Server,
        ] {
            let a = AttemptRecord {
                n: 3,
                verdict: Some(verdict),
                run_id: unique("run"),
                ..full.clone()
            };
            s.record_attempt(&a).await.unwrap();
            assert_eq!(
                s.attempts(&a.run_id).await.unwrap(),
                vec![a.clone()],
                "{}",
                db.label
            );
        }
        db.finish().await;
    }
}

#[tokio::test]
async fn a_paused_run_records_its_approval() {
    on_every_store("approval", check_approvals).await;
}

/// A run saved while it awaits a tool call records the call once; its answer rides on a later
/// save, and the first answer stays.
async fn check_approvals(s: &dyn Store, label: &str) {
    let mut r = record(&unique("run"), &unique("conv"));
    s.create_run(&r).await.unwrap();
    r.status = RunStatus::AwaitingApproval;
    r.pending_tool_call = Some(call("call_ask"));
    s.save_run(&r).await.unwrap();
    s.save_run(&r).await.unwrap();
    assert_eq!(s.run(&r.run_id).await.unwrap(), Some(r.clone()));
    let waiting = ApprovalRecord {
        run_id: r.run_id.clone(),
        tool_call: call("call_ask"),
        created_ms: r.updated_ms,
        decided: None,
    };
    assert_eq!(
        s.approvals(&r.run_id).await.unwrap(),
        vec![waiting.clone()],
        "{label}: saved twice, recorded once"
    );

    let decided = Decided {
        decision: Decision::Deny,
        result: "denied by the user".into(),
        continuation_run_id: "run_continuation".into(),
        decided_ms: r.updated_ms + 5,
    };
    r.status = RunStatus::Succeeded;
    r.pending_tool_call = None;
    let answer = Attached::Decision {
        tool_call_id: "call_ask".into(),
        decided: decided.clone(),
    };
    s.save_run_with(&r, &[answer]).await.unwrap();
    let second = Decided {
        decision: Decision::Approve,
        ..decided.clone()
    };
    s.record_decision(&r.run_id, "call_ask", &second)
        .await
        .unwrap();
    s.record_decision(&r.run_id, "call_never_asked", &second)
        .await
        .unwrap();
    assert_eq!(
        s.approvals(&r.run_id).await.unwrap(),
        vec![ApprovalRecord {
            decided: Some(decided),
            ..waiting
        }],
        "{label}: the first answer stays, an unknown call records nothing"
    );
    assert_eq!(s.run(&r.run_id).await.unwrap(), Some(r));
}

#[tokio::test]
async fn prune_deletes_finished_runs_older_than_the_cutoff_and_keeps_transcripts() {
    for db in fresh("prune").await {
        let s = &db.store;
        let day = 86_400_000;
        let now = epoch_ms();
        let conv = unique("conv");
        let mut old_done = record("run_old_done", &conv);
        old_done.status = RunStatus::Succeeded;
        old_done.updated_ms = now - 40 * day;
        let mut old_running = record("run_old_running", &conv);
        old_running.status = RunStatus::Running;
        old_running.updated_ms = now - 40 * day;
        let mut old_paused = record("run_old_paused", &conv);
        old_paused.status = RunStatus::AwaitingApproval;
        old_paused.pending_tool_call = Some(call("call_p"));
        old_paused.updated_ms = now - 40 * day;
        let mut new_done = record("run_new_done", &conv);
        new_done.status = RunStatus::Failed;
        for r in [&old_done, &old_running, &old_paused, &new_done] {
            s.save_run(r).await.unwrap();
            let a = AttemptRecord {
                run_id: r.run_id.clone(),
                n: 1,
                step: 1,
                route: "r".into(),
                http_status: Some(200),
                error: None,
                verdict: None,
                retry_hint_ms: None,
                ratelimit_remaining: None,
                provider_name: None,
                latency_ms: 1,
                t_ms: r.updated_ms,
            };
            s.record_attempt(&a).await.unwrap();
        }
        s.append_message(&conv, "run_old_done", "input", &Message::user("kept"))
            .await
            .unwrap();
        let pruned = s.prune(now - 30 * day).await.unwrap();
        assert_eq!(
            (pruned.runs, pruned.attempts, pruned.approvals),
            (1, 1, 0),
            "{}: {pruned:?}",
            db.label
        );
        assert_eq!(s.run("run_old_done").await.unwrap(), None);
        assert!(s.attempts("run_old_done").await.unwrap().is_empty());
        for kept in ["run_old_running", "run_old_paused", "run_new_done"] {
            assert!(
                s.run(kept).await.unwrap().is_some(),
                "{}: {kept} stays",
                db.label
            );
            assert_eq!(s.attempts(kept).await.unwrap().len(), 1);
        }
        assert_eq!(
            s.transcript(&conv).await.unwrap().len(),
            1,
            "{}: transcripts stay",
            db.label
        );
        assert_eq!(
            s.prune(now - 30 * day).await.unwrap(),
            Default::default(),
            "{}: nothing left to prune",
            db.label
        );
        db.finish().await;
    }
}

/// The board's list and the metrics' counts (issue 6), with the same answers from every store.
async fn check_recent_runs_and_counts(s: &dyn Store, label: &str) {
    assert!(s.count_by_status().await.unwrap().is_empty(), "{label}");
    let conv = unique("conv");
    let base = epoch_ms();
    let mut specs = vec![
        ("run_a", "u1", 1, RunStatus::Succeeded, None),
        ("run_b", "u2", 2, RunStatus::Failed, Some(Code::RateLimited)),
        ("run_c", "u1", 3, RunStatus::Delayed, None),
        ("run_d", "u1", 3, RunStatus::Failed, Some(Code::RateLimited)),
        (
            "run_e",
            "u2",
            5,
            RunStatus::Refused,
            Some(Code::AccountResting),
        ),
    ];
    specs.reverse();
    for (id, user, at, status, code) in &specs {
        let mut r = record(id, &conv);
        r.user_id = (*user).into();
        r.created_ms = base + at;
        r.status = *status;
        r.code = *code;
        s.save_run(&r).await.unwrap();
    }
    let ids = |runs: Vec<RunRecord>| runs.into_iter().map(|r| r.run_id).collect::<Vec<_>>();
    assert_eq!(
        ids(s.recent_runs(10, None).await.unwrap()),
        ["run_e", "run_d", "run_c", "run_b", "run_a"],
        "{label}: newest first, ties by id"
    );
    assert_eq!(
        ids(s.recent_runs(2, None).await.unwrap()),
        ["run_e", "run_d"],
        "{label}"
    );
    assert_eq!(
        ids(s.recent_runs(10, Some("u1")).await.unwrap()),
        ["run_d", "run_c", "run_a"],
        "{label}: one user's runs only"
    );
    assert!(s.recent_runs(10, Some("nobody")).await.unwrap().is_empty());
    let full = s.recent_runs(1, Some("u2")).await.unwrap();
    assert_eq!(
        full[0].code,
        Some(Code::AccountResting),
        "{label}: whole records"
    );
    let counts: Vec<(RunStatus, Option<Code>, u64)> = s
        .count_by_status()
        .await
        .unwrap()
        .into_iter()
        .map(|c| (c.status, c.code, c.runs))
        .collect();
    assert_eq!(
        counts,
        [
            (RunStatus::Delayed, None, 1),
            (RunStatus::Failed, Some(Code::RateLimited), 2),
            (RunStatus::Refused, Some(Code::AccountResting), 1),
            (RunStatus::Succeeded, None, 1),
        ],
        "{label}"
    );
}

#[tokio::test]
async fn recent_runs_are_newest_first_and_runs_are_counted_by_status_and_code() {
    on_every_store("recent", check_recent_runs_and_counts).await;
}

#[tokio::test]
async fn bad_urls_and_unreachable_databases_give_one_clear_line() {
    let err = SqlStore::open("mysql://localhost/x").await.unwrap_err();
    assert!(matches!(err, StoreError::BadUrl(_)), "{err}");
    let err = SqlStore::open("postgres://user:hunter2@127.0.0.1:1/x")
        .await
        .unwrap_err();
    let line = err.to_string();
    assert!(matches!(err, StoreError::Unavailable(_)), "{line}");
    assert!(
        !line.contains("hunter2") && !line.contains('\n') && line.contains("127.0.0.1:1"),
        "{line}"
    );
    assert!(
        line.contains("Connection refused"),
        "the cause, not a timeout: {line}"
    );
    let err = SqlStore::open("sqlite:///nonexistent-freeway-dir/x.db")
        .await
        .unwrap_err();
    assert!(
        matches!(err, StoreError::Unavailable(_)) && err.to_string().contains("does not exist"),
        "{err}"
    );
    let err = SqlStore::open("postgres://[::1").await.unwrap_err();
    assert!(matches!(err, StoreError::BadUrl(_)), "{err}");
}

#[tokio::test]
async fn sqlite_memory_urls_work_for_experiments() {
    let s = SqlStore::open("sqlite::memory:").await.unwrap();
    s.append_message("c", "r", "input", &Message::user("hi"))
        .await
        .unwrap();
    assert_eq!(s.transcript("c").await.unwrap().len(), 1);
}

#[tokio::test]
async fn an_encrypted_key_round_trips_and_the_raw_key_is_not_in_the_database() {
    let secret = SecretKey::from_hex(SECRET_HEX).unwrap();
    let keys = only(&secret);
    for db in fresh("connections").await {
        let s = &db.store;
        let raw = unique("sk-user-RAWKEY");
        let c = NewConnection {
            id: "conn_rt".into(),
            user_id: "u1".into(),
            provider: "openrouter".into(),
            api_key: ApiKey::new(raw.clone()),
        };
        s.put_connection(&secret, &c).await.unwrap();
        let (info, key) = s
            .connection_key(&keys, "conn_rt")
            .await
            .unwrap()
            .expect("stored");
        assert_eq!(
            (info.user_id.as_str(), info.provider.as_str(), key.expose()),
            ("u1", "openrouter", raw.as_str())
        );
        assert_eq!(s.connection("conn_rt").await.unwrap(), Some(info));
        assert!(
            !format!("{key:?} {c:?}").contains(&raw),
            "an ApiKey never prints"
        );
        // Another user cannot take the id over; the owner can replace the key.
        let theft = NewConnection {
            user_id: "u2".into(),
            ..c.clone()
        };
        assert!(
            matches!(
                s.put_connection(&secret, &theft).await,
                Err(StoreError::Conflict(_))
            ),
            "{}",
            db.label
        );
        let rotated = NewConnection {
            api_key: ApiKey::new(format!("{raw}-2")),
            ..c.clone()
        };
        s.put_connection(&secret, &rotated).await.unwrap();
        assert_eq!(
            s.connection_key(&keys, "conn_rt")
                .await
                .unwrap()
                .unwrap()
                .1
                .expose(),
            format!("{raw}-2")
        );
        // Another secret does not open it.
        let other = SecretKey::from_hex(&SECRET_HEX.replace('6', "7")).unwrap();
        assert!(matches!(
            s.connection_key(&only(&other), "conn_rt").await,
            Err(StoreError::Undecryptable(_))
        ));
        let bad = NewConnection {
            id: "platform".into(),
            ..c.clone()
        };
        assert!(matches!(
            s.put_connection(&secret, &bad).await,
            Err(StoreError::Invalid(_))
        ));
        // The raw key is nowhere in the database.
        match s.backend() {
            Backend::Sqlite => {
                let bytes = db.sqlite_bytes();
                assert!(!bytes.is_empty());
                assert!(
                    !contains(&bytes, raw.as_bytes()),
                    "the raw key is in the SQLite files"
                );
                assert!(contains(&bytes, b"conn_rt"), "the row is in the files read");
            }
            Backend::Postgres => {
                let rows = db.pg_rows("connections").await;
                assert!(
                    rows.contains("conn_rt") && rows.contains("v1:") && !rows.contains(&raw),
                    "{rows}"
                );
            }
        }
        assert!(
            !s.delete_connection("u2", "conn_rt").await.unwrap(),
            "only the owner deletes"
        );
        assert!(s.delete_connection("u1", "conn_rt").await.unwrap());
        assert_eq!(
            s.connection_key(&keys, "conn_rt")
                .await
                .unwrap()
                .map(|(i, _)| i),
            None
        );
        db.finish().await;
    }
}

/// Sealing and opening with `key` alone: no rotation under way.
fn only(key: &SecretKey) -> SecretKeys {
    SecretKeys {
        current: key.clone(),
        previous: None,
    }
}

#[tokio::test]
async fn a_rotated_secret_key_opens_old_keys_until_they_are_resealed() {
    let old = SecretKey::from_hex(SECRET_HEX).unwrap();
    let new = SecretKey::from_hex(&SECRET_HEX.replace('6', "8")).unwrap();
    let lost = SecretKey::from_hex(&SECRET_HEX.replace('6', "9")).unwrap();
    let rotating = SecretKeys {
        current: new.clone(),
        previous: Some(old.clone()),
    };
    for db in fresh("reseal").await {
        let s = &db.store;
        let put = |id: &str, key: &SecretKey| {
            let c = NewConnection {
                id: id.into(),
                user_id: "u1".into(),
                provider: "openrouter".into(),
                api_key: ApiKey::new(format!("sk-{id}")),
            };
            let key = key.clone();
            async move { s.put_connection(&key, &c).await.unwrap() }
        };
        put("conn_old", &old).await;
        put("conn_new", &new).await;
        put("conn_lost", &lost).await;
        let opened = |keys: SecretKeys, id: &'static str| async move {
            s.connection_key(&keys, id)
                .await
                .map(|found| found.map(|(_, key)| key.expose().to_string()))
        };
        assert!(
            matches!(
                opened(only(&new), "conn_old").await,
                Err(StoreError::Undecryptable(_))
            ),
            "{}: the new key alone does not open what the old one sealed",
            db.label
        );
        assert_eq!(
            opened(rotating.clone(), "conn_old")
                .await
                .unwrap()
                .as_deref(),
            Some("sk-conn_old"),
            "{}: while rotating, the previous key still opens it",
            db.label
        );

        let done = s.reseal_connections(&rotating).await.unwrap();
        assert_eq!(
            (done.resealed, done.current, done.unreadable),
            (1, 1, vec!["conn_lost".to_string()]),
            "{}",
            db.label
        );
        for id in ["conn_old", "conn_new"] {
            assert_eq!(
                opened(only(&new), id).await.unwrap(),
                Some(format!("sk-{id}")),
                "{}: after resealing, the new key alone opens {id}",
                db.label
            );
        }
        let again = s.reseal_connections(&rotating).await.unwrap();
        assert_eq!((again.resealed, again.current), (0, 2), "{}", db.label);
        db.finish().await;
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

#[test]
fn settings_read_the_secret_key_and_never_print_it() {
    use freeway::config::Settings;
    let vars = |v: &str| {
        [("FREEWAY_SECRET_KEY".to_string(), v.to_string())]
            .into_iter()
            .collect()
    };
    let s = Settings::from_vars(&vars(SECRET_HEX)).unwrap();
    assert!(s.secret_key.is_some());
    assert!(!format!("{s:?}").contains(&SECRET_HEX[..16]));
    let e = Settings::from_vars(&vars("not-hex")).unwrap_err();
    assert_eq!(e.var, "FREEWAY_SECRET_KEY");
    assert!(!e.to_string().contains("not-hex"), "{e}");
    assert!(
        Settings::from_vars(&Default::default())
            .unwrap()
            .secret_key
            .is_none()
    );
    let other = SECRET_HEX.replace('6', "8");
    let both: std::collections::HashMap<String, String> = [
        ("FREEWAY_SECRET_KEY".to_string(), other.clone()),
        (
            "FREEWAY_SECRET_KEY_PREVIOUS".to_string(),
            SECRET_HEX.to_string(),
        ),
    ]
    .into_iter()
    .collect();
    let rotating = Settings::from_vars(&both).unwrap();
    assert!(rotating.secret_keys().is_some_and(|k| k.previous.is_some()));
    assert!(!format!("{rotating:?}").contains(&other[..16]));
    let previous_alone: std::collections::HashMap<String, String> = [(
        "FREEWAY_SECRET_KEY_PREVIOUS".to_string(),
        SECRET_HEX.to_string(),
    )]
    .into_iter()
    .collect();
    let e = Settings::from_vars(&previous_alone).unwrap_err();
    assert_eq!(e.var, "FREEWAY_SECRET_KEY_PREVIOUS", "{e}");
}

// ---- the real engine on the SQL store ----

/// Answers at once with a scripted outcome (then plain answers), counting calls.
#[derive(Default)]
struct Scripted {
    script: Mutex<VecDeque<Result<Completion, CallError>>>,
    calls: Mutex<u32>,
}

impl Scripted {
    fn with(script: Vec<Result<Completion, CallError>>) -> Arc<Scripted> {
        Arc::new(Scripted {
            script: Mutex::new(script.into()),
            calls: Mutex::new(0),
        })
    }
}

fn answer(text: &str) -> Result<Completion, CallError> {
    Ok(Completion {
        text: text.into(),
        finish_reason: Some("stop".into()),
        ..Default::default()
    })
}

fn tool_step(text: &str, id: &str) -> Result<Completion, CallError> {
    Ok(Completion {
        text: text.into(),
        tool_calls: vec![call(id)],
        finish_reason: Some("tool_calls".into()),
        ..Default::default()
    })
}

fn account_429() -> Result<Completion, CallError> {
    let headers: Headers = [("X-RateLimit-Limit", "20"), ("X-RateLimit-Remaining", "0")]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Err(CallError::Http {
        status: 429,
        headers,
        body: concat!(
            r#"{"error":{"message":"Rate limit exceeded: free-models-per-min.","code":429,"#,
            r#""metadata":{"limit_source":"openrouter_free_tier_per_minute"}}}"#
        )
        .into(),
    })
}

#[async_trait]
impl ChatProvider for Scripted {
    async fn call(
        &self,
        _t: &Target,
        _r: &ChatRequest,
        deltas: &UnboundedSender<String>,
    ) -> Result<Completion, CallError> {
        *self.calls.lock().unwrap() += 1;
        let next = self
            .script
            .lock()
            .unwrap()
            .pop_front()
            .unwrap_or_else(|| answer("answer"));
        if let Ok(c) = &next {
            let _ = deltas.send(c.text.clone());
        }
        next
    }
}

struct Rig {
    engine: Engine,
    store: SqlStore,
    rests: Arc<MemoryRests>,
    events: Arc<MemoryEvents>,
}

fn rig(
    store: &SqlStore,
    provider: Arc<dyn ChatProvider>,
    targets: Arc<dyn Targets>,
    fleet: Fleet,
) -> Engine {
    Engine::new(
        provider,
        targets,
        Arc::new(store.clone()) as Arc<dyn Store>,
        fleet,
    )
    .with_clock(Arc::new(InstantClock::default()))
    .named("store-suite")
}

fn engine_on(store: &SqlStore, provider: Arc<dyn ChatProvider>) -> Rig {
    let events = Arc::new(MemoryEvents::default());
    let rests = Arc::new(MemoryRests::default());
    let targets = Arc::new(EnvTargets {
        openrouter_base_url: "http://127.0.0.1:9".into(),
        platform_key: Some(ApiKey::new("sk-platform")),
    });
    let fleet = Fleet {
        rests: rests.clone(),
        events: events.clone(),
        ..Fleet::in_memory()
    };
    Rig {
        engine: rig(store, provider, targets, fleet),
        store: store.clone(),
        rests,
        events,
    }
}

fn job(
    conversation_id: &str,
    input: Option<&str>,
    regenerate: bool,
    models: &[&str],
) -> (RunJob, Vec<Route>) {
    let request = RunRequest {
        user_id: "u1".into(),
        conversation_id: Some(conversation_id.into()),
        kind: Kind::Chat,
        input: input.map(str::to_string),
        routes: models.iter().map(|m| RouteSpec::parse_cli(m)).collect(),
        tools: vec![ToolSpec {
            name: "lookup".into(),
            description: String::new(),
            parameters: serde_json::json!({"type": "object"}),
            approval: Default::default(),
        }],
        system: None,
        deadline_s: None,
        on_rest: Default::default(),
        regenerate,
        idempotency_key: None,
    };
    let job = RunJob::new(request, epoch_ms());
    let routes = job.check().expect("a valid job");
    (job, routes)
}

const FREE: &str = "vendor/m:free";

impl Rig {
    async fn rest_the_pool(&self) {
        self.rests
            .write(
                &RestScope::Pool(OPENROUTER_FREE_POOL.into()),
                RestLength::For(120_000),
                "test",
            )
            .await
            .unwrap();
    }
    async fn wake_the_pool(&self) {
        self.rests
            .clear("pool", OPENROUTER_FREE_POOL)
            .await
            .unwrap();
    }
    async fn seed(&self, conv: &str) -> Vec<Message> {
        let seed = vec![
            Message::user("q1"),
            Message::assistant(Some("a1".into()), vec![]),
        ];
        for (i, m) in seed.iter().enumerate() {
            self.store
                .append_message(conv, "run_seed", &format!("k{i}"), m)
                .await
                .unwrap();
        }
        seed
    }
}

#[tokio::test]
async fn a_duplicated_delivery_appends_the_user_message_once() {
    for db in fresh("engine-duplicate").await {
        let provider = Scripted::with(vec![]);
        let rig = engine_on(&db.store, provider.clone());
        let conv = unique("conv");
        let (job, routes) = job(&conv, Some("hello"), false, &[FREE]);
        // Two deliveries of the same job at once (a redelivery while the first still runs)…
        let (a, b) = tokio::join!(
            rig.engine.execute(&job, &routes, WhenResting::Refuse),
            rig.engine.execute(&job, &routes, WhenResting::Refuse)
        );
        for o in [a.unwrap(), b.unwrap()] {
            assert!(
                matches!(
                    o,
                    Outcome::Finished {
                        status: RunStatus::Succeeded,
                        ..
                    } | Outcome::Skipped(_)
                        | Outcome::Busy { .. }
                ),
                "{}: {o:?}",
                db.label
            );
        }
        // …and one after it finished.
        let third = rig
            .engine
            .execute(&job, &routes, WhenResting::Refuse)
            .await
            .unwrap();
        assert_eq!(
            third,
            Outcome::Skipped(RunStatus::Succeeded),
            "{}",
            db.label
        );
        let transcript = db.store.transcript(&conv).await.unwrap();
        let users: Vec<_> = transcript
            .iter()
            .filter(|m| m.content.as_deref() == Some("hello"))
            .collect();
        assert_eq!(users.len(), 1, "{}: {transcript:?}", db.label);
        assert_eq!(
            transcript.len(),
            2,
            "{}: one user message, one answer: {transcript:?}",
            db.label
        );
        // One executor at a time (the run's lease): the concurrent delivery made no call.
        assert_eq!(*provider.calls.lock().unwrap(), 1, "{}", db.label);
        db.finish().await;
    }
}

#[tokio::test]
async fn a_refused_run_leaves_the_transcript_untouched() {
    for db in fresh("engine-refused").await {
        let provider = Scripted::with(vec![]);
        let rig = engine_on(&db.store, provider.clone());
        let conv = unique("conv");
        let seed = rig.seed(&conv).await;
        rig.rest_the_pool().await;
        let (ask, routes) = job(&conv, Some("q2"), false, &[FREE]);
        let outcome = rig
            .engine
            .execute(&ask, &routes, WhenResting::Refuse)
            .await
            .unwrap();
        assert!(
            matches!(
                outcome,
                Outcome::Refused {
                    code: Code::AccountResting,
                    ..
                }
            ),
            "{}: {outcome:?}",
            db.label
        );
        assert_eq!(
            db.store.transcript(&conv).await.unwrap(),
            seed,
            "{}: a refused run writes nothing",
            db.label
        );
        let rec = db.store.run(&ask.run_id).await.unwrap().unwrap();
        assert_eq!(
            (rec.status, rec.code, rec.state.input_applied),
            (RunStatus::Refused, Some(Code::AccountResting), false)
        );
        // A regenerate refused by pre-flight does not delete the turn it would replace…
        let (regen, routes) = job(&conv, None, true, &[FREE]);
        let outcome = rig
            .engine
            .execute(&regen, &routes, WhenResting::Refuse)
            .await
            .unwrap();
        assert!(matches!(outcome, Outcome::Refused { .. }), "{outcome:?}");
        assert_eq!(
            db.store.transcript(&conv).await.unwrap(),
            seed,
            "{}: the last turn survives a refusal",
            db.label
        );
        assert_eq!(*provider.calls.lock().unwrap(), 0);
        // …and replaces it once pre-flight passes.
        rig.wake_the_pool().await;
        let (regen, routes) = job(&conv, None, true, &[FREE]);
        let outcome = rig
            .engine
            .execute(&regen, &routes, WhenResting::Refuse)
            .await
            .unwrap();
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
        let after = db.store.transcript(&conv).await.unwrap();
        assert_eq!(
            after,
            vec![
                Message::user("q1"),
                Message::assistant(Some("answer".into()), vec![])
            ],
            "{}",
            db.label
        );
        db.finish().await;
    }
}

#[tokio::test]
async fn a_snoozed_run_resumes_with_its_counters() {
    for db in fresh("engine-snooze").await {
        let provider = Scripted::with(vec![account_429()]);
        let rig = engine_on(&db.store, provider.clone());
        let conv = unique("conv");
        let (job, routes) = job(&conv, Some("hello"), false, &[FREE]);
        let first = rig
            .engine
            .execute(&job, &routes, WhenResting::Snooze)
            .await
            .unwrap();
        assert!(
            matches!(first, Outcome::Snoozed { .. }),
            "{}: {first:?}",
            db.label
        );
        let snoozed = db.store.run(&job.run_id).await.unwrap().unwrap();
        assert_eq!(snoozed.status, RunStatus::Delayed);
        assert_eq!(
            (
                snoozed.state.counters.calls,
                snoozed.state.counters.step1_attempts,
                snoozed.state.snoozes
            ),
            (1, 1, 1)
        );
        // The pool reopens; the re-pushed job runs in a new delivery that starts from the store.
        rig.wake_the_pool().await;
        let second = rig
            .engine
            .execute(&job, &routes, WhenResting::Snooze)
            .await
            .unwrap();
        assert!(
            matches!(
                second,
                Outcome::Finished {
                    status: RunStatus::Succeeded,
                    ..
                }
            ),
            "{}: {second:?}",
            db.label
        );
        let done = db.store.run(&job.run_id).await.unwrap().unwrap();
        assert_eq!(
            (
                done.state.counters.calls,
                done.state.counters.step1_attempts,
                done.state.snoozes
            ),
            (2, 2, 1),
            "{}",
            db.label
        );
        let attempts = db.store.attempts(&job.run_id).await.unwrap();
        assert_eq!(
            attempts
                .iter()
                .map(|a| (a.n, a.http_status, a.verdict))
                .collect::<Vec<_>>(),
            vec![(1, Some(429), Some(Verdict::Account)), (2, Some(200), None)]
        );
        assert_eq!(attempts[0].ratelimit_remaining, Some(0), "{}", db.label);
        let users = db
            .store
            .transcript(&conv)
            .await
            .unwrap()
            .iter()
            .filter(|m| m.content.as_deref() == Some("hello"))
            .count();
        assert_eq!(users, 1, "{}", db.label);
        db.finish().await;
    }
}

#[tokio::test]
async fn a_run_that_ends_early_keeps_its_partial_output_marked_incomplete() {
    for db in fresh("engine-partial").await {
        let script = (1..=5)
            .map(|i| tool_step(&format!("thinking {i}"), &format!("call_{i}")))
            .collect();
        let rig = engine_on(&db.store, Scripted::with(script));
        let conv = unique("conv");
        let (job, routes) = job(&conv, Some("dig"), false, &[FREE]);
        let outcome = rig
            .engine
            .execute(&job, &routes, WhenResting::Refuse)
            .await
            .unwrap();
        assert_eq!(
            outcome,
            Outcome::Finished {
                status: RunStatus::Failed,
                code: Some(Code::BudgetExhausted)
            },
            "{}",
            db.label
        );
        let rec = db.store.run(&job.run_id).await.unwrap().unwrap();
        assert_eq!(
            (rec.output.as_str(), rec.incomplete),
            ("thinking 5", true),
            "{}",
            db.label
        );
        let transcript = db.store.transcript(&conv).await.unwrap();
        assert_eq!(
            transcript.len(),
            1 + 5 + 4,
            "{}: the input, five steps, four tool results",
            db.label
        );
        assert_eq!(transcript[1].tool_calls, vec![call("call_1")]);
        assert_eq!(transcript[2].tool_call_id.as_deref(), Some("call_1"));
        assert!(
            rig.events
                .of(&job.run_id)
                .iter()
                .any(|e| matches!(e, Event::Finished { .. }))
        );
        db.finish().await;
    }
}

/// Everything a tracing subscriber writes, for looking for secrets in log lines.
#[derive(Clone, Default)]
struct LogBuffer(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for LogBuffer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Every key of a Redis namespace with its contents, as text.
async fn redis_dump(ns: &str) -> String {
    let mut conn = support::redis().await;
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{ns}:*"))
        .query_async(&mut conn)
        .await
        .unwrap();
    let mut text = String::new();
    for key in keys {
        let kind: String = redis::cmd("TYPE")
            .arg(&key)
            .query_async(&mut conn)
            .await
            .unwrap();
        let value: redis::Value = match kind.as_str() {
            "string" => redis::cmd("GET")
                .arg(&key)
                .query_async(&mut conn)
                .await
                .unwrap(),
            "zset" => redis::cmd("ZRANGE")
                .arg(&key)
                .arg(0)
                .arg(-1)
                .arg("WITHSCORES")
                .query_async(&mut conn)
                .await
                .unwrap(),
            "hash" => redis::cmd("HGETALL")
                .arg(&key)
                .query_async(&mut conn)
                .await
                .unwrap(),
            "stream" => redis::cmd("XRANGE")
                .arg(&key)
                .arg("-")
                .arg("+")
                .query_async(&mut conn)
                .await
                .unwrap(),
            "set" => redis::cmd("SMEMBERS")
                .arg(&key)
                .query_async(&mut conn)
                .await
                .unwrap(),
            "list" => redis::cmd("LRANGE")
                .arg(&key)
                .arg(0)
                .arg(-1)
                .query_async(&mut conn)
                .await
                .unwrap(),
            other => panic!("unexpected Redis type {other} at {key}"),
        };
        text.push_str(&format!("{key} {value:?}\n"));
    }
    text
}

#[tokio::test]
async fn a_user_connection_is_opened_at_call_time_and_its_key_leaks_nowhere() {
    let secret = SecretKey::from_hex(SECRET_HEX).unwrap();
    let logs = LogBuffer::default();
    let writer = logs.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    for db in fresh("engine-connection").await {
        let raw = unique("sk-user-RAWKEY");
        let conn_id = unique("conn");
        let c = NewConnection {
            id: conn_id.clone(),
            user_id: "u1".into(),
            provider: "openrouter".into(),
            api_key: ApiKey::new(raw.clone()),
        };
        db.store.put_connection(&secret, &c).await.unwrap();

        let sim = sim::start(sim::SimConfig::default(), "127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        sim.inject(sim::FaultSpec::new(sim::FaultKind::Upstream429));
        let timeouts = Timeouts {
            connect: Duration::from_secs(2),
            first_byte: Duration::from_secs(5),
            idle: Duration::from_secs(5),
            total: Duration::from_secs(10),
        };
        let provider = Arc::new(HttpProvider::new(timeouts).unwrap());
        let env = EnvTargets {
            openrouter_base_url: sim.base_url(),
            platform_key: Some(ApiKey::new("sk-platform")),
        };
        let targets = Arc::new(StoreTargets::new(
            env,
            db.store.clone(),
            Some(only(&secret)),
        ));
        let redis_conn = support::redis().await;
        let ns = support::unique_ns("leak");
        let engine = rig(&db.store, provider, targets, Fleet::redis(&redis_conn, &ns));

        let conv = unique("conv");
        let first = format!("vendor/paid-a@{conn_id}");
        let second = format!("vendor/paid-b@{conn_id}");
        let (job, routes) = job(&conv, Some("hello"), false, &[&first, &second]);
        let outcome = engine
            .execute(&job, &routes, WhenResting::Refuse)
            .await
            .unwrap();
        assert!(
            matches!(
                outcome,
                Outcome::Finished {
                    status: RunStatus::Succeeded,
                    ..
                }
            ),
            "{}: {outcome:?}",
            db.label
        );

        let calls = sim.calls();
        assert_eq!(calls.len(), 2, "{}: a 429 then an answer", db.label);
        assert!(
            calls.iter().all(|c| c.key == raw),
            "{}: the sim got the user's own key",
            db.label
        );
        let payload = serde_json::to_string(&job).unwrap();
        assert!(
            payload.contains(&conn_id) && !payload.contains(&raw),
            "the job names only the connection"
        );
        let redis = redis_dump(&ns).await;
        assert!(
            redis.contains(&conn_id),
            "{}: the rest and the events name the connection: {redis}",
            db.label
        );
        assert!(
            !redis.contains(&raw),
            "{}: the raw key is in Redis: {redis}",
            db.label
        );
        match db.store.backend() {
            Backend::Sqlite => assert!(
                !contains(&db.sqlite_bytes(), raw.as_bytes()),
                "the raw key is in the SQLite files"
            ),
            Backend::Postgres => {
                for table in [
                    "connections",
                    "runs",
                    "attempts",
                    "messages",
                    "conversations",
                ] {
                    assert!(
                        !db.pg_rows(table).await.contains(&raw),
                        "the raw key is in {table}"
                    );
                }
            }
        }
        sim.shutdown().await;

        // Without FREEWAY_SECRET_KEY the keys cannot be opened: an infrastructure fault, not the
        // connection's.
        let no_secret = StoreTargets::new(
            EnvTargets {
                openrouter_base_url: "http://127.0.0.1:9".into(),
                platform_key: None,
            },
            db.store.clone(),
            None,
        );
        let route = Route::resolve(&RouteSpec::parse_cli(&first)).unwrap();
        let err = no_secret.target(&route, "u1").await.unwrap_err();
        assert!(matches!(err, TargetError::Unavailable(_)), "{err:?}");
        assert!(
            err.to_string().contains("FREEWAY_SECRET_KEY"),
            "says why: {err}"
        );
        let missing = Route::resolve(&RouteSpec::parse_cli("m@conn_missing")).unwrap();
        let with_secret = StoreTargets::new(
            EnvTargets {
                openrouter_base_url: "http://127.0.0.1:9".into(),
                platform_key: None,
            },
            db.store.clone(),
            Some(only(&secret)),
        );
        assert_eq!(
            with_secret.target(&missing, "u1").await.unwrap_err(),
            TargetError::UnknownConnection("conn_missing".into())
        );
        assert!(with_secret.target(&route, "u1").await.is_ok());
        assert_eq!(
            with_secret.target(&route, "u2").await.unwrap_err(),
            TargetError::UnknownConnection(conn_id.clone()),
            "{}: another user's run cannot open u1's connection",
            db.label
        );
        db.finish().await;
    }
    let logs = String::from_utf8_lossy(&logs.0.lock().unwrap()).into_owned();
    assert!(!logs.contains("RAWKEY"), "a raw key is in the logs: {logs}");
}
