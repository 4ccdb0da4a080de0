//! What the producer's tests share: a real Redis (`REDIS_URL`, default
//! `redis://127.0.0.1:6379`), a fresh namespace per test so tests run in parallel, the real SQL
//! store on a temporary SQLite file, and the API served in-process on 127.0.0.1:0. Without a
//! Redis, a server or fleet is `None` and the test returns, as [`skip`] says.

#![allow(dead_code)] // each test binary uses part of this module

pub(crate) mod browser;
pub(crate) mod fleet;
#[path = "../../../tests/support/skip.rs"]
pub(crate) mod skip;

use freeway::connect::RedisConnection;
use freeway::events::{Event, EventSink, RedisEvents};
use freeway::store::{SecretKey, SqlStore};
use producer::api::{self, AppState, auth::Tokens};
use producer::hub::Hub;
use queue::Enqueuer;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use tokio::sync::watch;

pub(crate) const SECRET_HEX: &str =
    "5f5dbb7fe192bcc2bf10bb66a83d5c1e39035bd981ba29773d79e7f3ff225967";

pub(crate) fn unique(prefix: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!(
        "{prefix}-{}-{nanos}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

pub(crate) fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(unique(&format!("freeway-producer-{name}")));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

/// The API served in-process, with its own namespace, store and tokens.
/// The web app origin every test server lets read a run's events with its `events_url`.
pub(crate) const CORS_ORIGIN: &str = "http://127.0.0.1:3999";

pub(crate) struct Server {
    pub base: String,
    pub ns: String,
    pub db_url: String,
    pub db_path: PathBuf,
    pub store: SqlStore,
    pub enqueuer: Enqueuer,
    pub conn: RedisConnection,
    pub http: reqwest::Client,
    /// The state the router serves, for a test that builds the router again to look at it.
    pub state: Arc<AppState>,
    _shutdown: watch::Sender<bool>,
}

impl Server {
    pub(crate) async fn start(tokens: Tokens, secret_key: Option<SecretKey>) -> Option<Server> {
        let streams = freeway::config::DEFAULT_MAX_STREAMS;
        Server::start_capped(tokens, secret_key, streams).await
    }

    /// With at most `max_streams` event streams open at once.
    pub(crate) async fn start_capped(
        tokens: Tokens,
        secret_key: Option<SecretKey>,
        max_streams: usize,
    ) -> Option<Server> {
        let catalog = freeway::catalog::Catalog::builtin();
        Server::start_with(tokens, secret_key, max_streams, catalog).await
    }

    /// Without tokens, validating runs against `catalog` (its tiers, providers and pools).
    pub(crate) async fn with_catalog(catalog: freeway::catalog::Catalog) -> Option<Server> {
        let streams = freeway::config::DEFAULT_MAX_STREAMS;
        Server::start_with(Tokens::default(), None, streams, catalog).await
    }

    async fn start_with(
        tokens: Tokens,
        secret_key: Option<SecretKey>,
        max_streams: usize,
        catalog: freeway::catalog::Catalog,
    ) -> Option<Server> {
        freeway::provider::install_crypto();
        let conn = skip::redis().await?;
        let ns = unique("ptest");
        let dir = temp_dir("db");
        let db_path = dir.join("freeway.db");
        let db_url = format!("sqlite://{}", db_path.display());
        let store = SqlStore::open(&db_url).await.expect("store opens");
        let enqueuer = Enqueuer::new(conn.clone(), &ns, Arc::new(store.clone()))
            .with_catalog(Arc::new(catalog));
        let (shutdown_tx, shutdown) = watch::channel(false);
        let state = Arc::new(AppState {
            enqueuer: enqueuer.clone(),
            fleet: enqueuer.fleet().clone(),
            store: store.clone(),
            hub: Hub::new(&skip::redis_url(), conn.clone(), max_streams),
            stream_slots: producer::api::stream_slots::StreamSlots::new(max_streams),
            rate_limits: producer::api::request_rate::RateLimits::new(
                freeway::config::DEFAULT_RATE_LIMIT,
            ),
            tokens,
            signer: secret_key.as_ref().map(freeway::signed::EventsSigner::new),
            cors_origins: vec![CORS_ORIGIN.to_string()],
            secret_key,
            totals: Default::default(),
            shutdown,
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a free port");
        let base = format!("http://{}", listener.local_addr().expect("bound"));
        let router = api::router(state.clone());
        tokio::spawn(async move { axum::serve(listener, router).await.expect("the API serves") });
        Some(Server {
            base,
            ns,
            db_url,
            db_path,
            store,
            enqueuer,
            conn,
            http: reqwest::Client::new(),
            state,
            _shutdown: shutdown_tx,
        })
    }

    /// The API without tokens; `None` (said) without a Redis to serve it on.
    pub(crate) async fn open() -> Option<Server> {
        Server::start(Tokens::default(), None).await
    }

    pub(crate) fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub(crate) fn events(&self) -> RedisEvents {
        RedisEvents::new(self.conn.clone(), self.ns.clone())
    }

    pub(crate) async fn publish(&self, run_id: &str, events: &[Event]) {
        let sink = self.events();
        for e in events {
            sink.publish(run_id, e).await.expect("publish");
        }
    }

    /// POST a run; returns the status and the JSON body.
    pub(crate) async fn post_run(&self, body: &serde_json::Value) -> (u16, serde_json::Value) {
        let resp = self
            .http
            .post(self.url("/v1/runs"))
            .json_body(body)
            .send()
            .await
            .expect("POST /v1/runs");
        let status = resp.status().as_u16();
        (status, json_of(resp).await)
    }

    pub(crate) async fn get_json(&self, path: &str) -> (u16, serde_json::Value) {
        let resp = self.http.get(self.url(path)).send().await.expect("GET");
        let status = resp.status().as_u16();
        (status, json_of(resp).await)
    }

    /// Rows in the store's `runs` table.
    pub(crate) async fn stored_runs(&self) -> i64 {
        let pool = sqlx::SqlitePool::connect(&self.db_url).await.expect("db");
        let n: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM runs")
            .fetch_one(&pool)
            .await
            .expect("count");
        pool.close().await;
        n
    }

    /// Redis keys of this test's namespace that match `pattern` (after `{ns}:`).
    pub(crate) async fn keys(&self, pattern: &str) -> Vec<String> {
        let mut conn = self.conn.clone();
        redis::cmd("KEYS")
            .arg(format!("{}:{pattern}", self.ns))
            .query_async(&mut conn)
            .await
            .expect("KEYS")
    }
}

/// JSON bodies without reqwest's `json` feature.
pub(crate) trait JsonBody {
    fn json_body(self, body: &serde_json::Value) -> Self;
}

impl JsonBody for reqwest::RequestBuilder {
    fn json_body(self, body: &serde_json::Value) -> Self {
        self.header("content-type", "application/json")
            .body(body.to_string())
    }
}

pub(crate) async fn json_of(resp: reqwest::Response) -> serde_json::Value {
    let text = resp.text().await.expect("a body");
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

pub(crate) fn run_body(user: &str, model: &str) -> serde_json::Value {
    serde_json::json!({ "user_id": user, "input": "hello", "routes": [{ "model": model }] })
}

/// Spawn `cmd`, a `producer serve` with its stderr piped, and wait for its "producer listening"
/// log line: the child and the base URL it serves.
pub(crate) async fn listening(mut cmd: tokio::process::Command) -> (tokio::process::Child, String) {
    use tokio::io::AsyncBufReadExt;
    freeway::provider::install_crypto();
    cmd.env("FREEWAY_LOG_FORMAT", "json");
    let mut child = cmd.spawn().expect("spawns");
    let stderr = child.stderr.take().expect("stderr piped");
    let mut logs = tokio::io::BufReader::new(stderr).lines();
    let addr = loop {
        let line = logs
            .next_line()
            .await
            .expect("stderr")
            .expect("a listening line before the end");
        let log: serde_json::Value = serde_json::from_str(&line).expect("a JSON log line");
        if log["fields"]["message"] == "producer listening" {
            break log["fields"]["addr"].as_str().expect("addr").to_string();
        }
    };
    // Keep reading its logs: a closed pipe would fail its writes.
    tokio::spawn(async move { while let Ok(Some(_)) = logs.next_line().await {} });
    (child, format!("http://{addr}"))
}
