//! The store's contract (docs/design.md §5), one suite for both backends: every test runs
//! on a fresh SQLite file and, when `PG_URL` is set (`scripts/test.sh` starts a private server), on
//! a fresh PostgreSQL database. Without `PG_URL` the PostgreSQL half is skipped, loudly.
//!
//! Engine tests run the real [`Engine`](freeway::engine::Engine) on the SQL store, the in-process
//! fleet and a fake provider or the simulator; the one that checks where a user's key may end up
//! also uses a real Redis (`REDIS_URL`).

#[path = "../support/mod.rs"]
mod support;

mod batches;
mod connections;
mod engine;
mod lifecycle;
mod runs;
mod transcript;
mod usage;

use freeway::budget::Kind;
use freeway::chat::{ToolCall, Usage};
use freeway::clock::epoch_ms;
use freeway::route::RouteSpec;
use freeway::run::{RunRecord, RunState, RunStatus};
use freeway::store::{MemoryStore, SecretKey, SecretKeys, SqlStore, Store};
use sqlx::{Connection, Row};
use std::path::PathBuf;

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
        None => support::skip::skipped(
            "PostgreSQL",
            "PG_URL is not set, so each test runs on SQLite alone",
        ),
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
        retry_of: None,
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
        tenant: "u1".into(),
        tier: "default".into(),
        priority: Default::default(),
        max_usd: None,
        cost_usd: 0.0,
    }
}

fn call(id: &str) -> ToolCall {
    ToolCall {
        id: id.into(),
        name: "lookup".into(),
        arguments: r#"{"q":"x"}"#.into(),
        extra_content: None,
    }
}

/// Run `check` on a fresh SQLite store, PostgreSQL store (with `PG_URL`) and memory store.
async fn on_every_store(test: &str, check: impl AsyncFn(&dyn Store, &str)) {
    for db in fresh(test).await {
        check(&db.store, db.label).await;
        db.finish().await;
    }
    check(&MemoryStore::default(), "memory").await;
}

/// Sealing and opening with `key` alone: no rotation under way.
fn only(key: &SecretKey) -> SecretKeys {
    SecretKeys {
        current: key.clone(),
        previous: None,
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}
