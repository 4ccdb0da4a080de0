//! A small cluster for end-to-end tests: real Redis (REDIS_URL), a SQLite store in a temp
//! folder, the simulator in-process, and worker *processes* started from the built binary.
//! Without a Redis, a cluster is `None` and the test returns, as [`skip`] says.
#![allow(dead_code)]

#[path = "../../../tests/support/skip.rs"]
pub(crate) mod skip;

use freeway::catalog::Catalog;
use freeway::connect::RedisConnection;
use freeway::events::stream_key;
use freeway::job::{RunJob, RunRequest};
use freeway::route::RouteSpec;
use freeway::store::SqlStore;
use queue::Queue;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// One stream of an `XREAD` reply: its key and its entries (id, field-value pairs).
type StreamReply = (String, Vec<(String, Vec<(String, String)>)>);

pub(crate) const KEY: &str = "sk-or-v1-e2e-platform-key";

pub(crate) struct Cluster {
    pub ns: String,
    pub redis_url: String,
    pub db_url: String,
    pub dir: PathBuf,
    pub sim: sim::SimHandle,
    pub queue: Queue,
    pub conn: RedisConnection,
    pub store: SqlStore,
    pub workers: Vec<Child>,
}

impl Cluster {
    pub(crate) async fn start(name: &str, sim_config: sim::SimConfig) -> Option<Cluster> {
        Cluster::start_on(name, sim_config, skip::redis_url()).await
    }

    /// A cluster on the Redis at `redis_url` (a test's own server, to flush or stop).
    pub(crate) async fn start_on(
        name: &str,
        sim_config: sim::SimConfig,
        redis_url: String,
    ) -> Option<Cluster> {
        Cluster::start_with(name, sim_config, redis_url, None).await
    }

    /// A cluster whose store is the database at `db_url` (`None`: a SQLite file of its own).
    pub(crate) async fn start_with(
        name: &str,
        sim_config: sim::SimConfig,
        redis_url: String,
        db_url: Option<String>,
    ) -> Option<Cluster> {
        freeway::provider::install_crypto();
        let conn = skip::redis_at(&redis_url).await?;
        let ns = format!(
            "e2e-{name}-{}",
            ulid::Ulid::generate().to_string().to_lowercase()
        );
        let dir = std::env::temp_dir().join(&ns);
        std::fs::create_dir_all(&dir).unwrap();
        let db_url =
            db_url.unwrap_or_else(|| format!("sqlite://{}", dir.join("freeway.db").display()));
        let store = SqlStore::open(&db_url).await.unwrap();
        let sim = sim::start(sim_config, "127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let queue = Queue::new(conn.clone(), &ns);
        Some(Cluster {
            ns,
            redis_url,
            db_url,
            dir,
            sim,
            queue,
            conn,
            store,
            workers: vec![],
        })
    }

    /// Start a worker process; its log goes to `worker-N.log` in the cluster's folder.
    pub(crate) fn spawn_worker(&mut self, args: &[&str]) -> usize {
        self.spawn_worker_with(args, &[])
    }

    /// [`Cluster::spawn_worker`] with more environment variables (`FREEWAY_CONFIG`, …).
    pub(crate) fn spawn_worker_with(&mut self, args: &[&str], env: &[(&str, &str)]) -> usize {
        let n = self.workers.len();
        let log = std::fs::File::create(self.dir.join(format!("worker-{n}.log"))).unwrap();
        // A 1 s heartbeat makes crash recovery quick; a test may ask for another.
        let unless_given = |flag: &'static str, value: &'static str| -> Vec<&str> {
            match args.contains(&flag) {
                true => Vec::new(),
                false => vec![flag, value],
            }
        };
        let child = Command::new(env!("CARGO_BIN_EXE_worker"))
            .args(unless_given("--heartbeat-s", "1"))
            .args(unless_given("--grace-s", "5"))
            .args(args)
            .env("REDIS_URL", &self.redis_url)
            .env("DATABASE_URL", &self.db_url)
            .env("FREEWAY_NAMESPACE", &self.ns)
            .env("OPENROUTER_BASE_URL", self.sim.base_url())
            .env("OPENROUTER_API_KEY", KEY)
            .env("RUST_LOG", "info")
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        self.workers.push(child);
        n
    }

    /// Every provider call the sim saw was counted by a run, and no run exceeds the budget table
    /// (docs/design.md §2.1). `runs` are every run the test enqueued.
    pub(crate) async fn assert_budgets(&self, runs: &[RunJob]) {
        use freeway::store::Store;
        let mut counted = 0;
        for job in runs {
            let Some(rec) = self.store.run(&job.run_id).await.unwrap() else {
                continue;
            };
            let budget =
                freeway::budget::Budget::new(job.request.kind, job.request.routes.len(), false);
            assert!(
                rec.state.counters.calls <= budget.max_calls(),
                "{} made {} calls",
                job.run_id,
                rec.state.counters.calls
            );
            counted += rec.state.counters.calls as usize;
        }
        assert_eq!(
            self.chat_calls(),
            counted,
            "every call the sim saw belongs to a counted attempt"
        );
    }

    /// Block until `done` holds of the simulator (it is polled: the sim has no event stream).
    pub(crate) async fn sim_until(
        &self,
        timeout: Duration,
        done: impl Fn(&sim::SimHandle) -> bool,
    ) {
        let deadline = tokio::time::Instant::now() + timeout;
        while !done(&self.sim) {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the sim did not get there in {timeout:?}: {:?}",
                self.sim.calls()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The chat calls the sim saw.
    pub(crate) fn chat_calls(&self) -> usize {
        self.sim.calls().len()
    }

    pub(crate) fn log(&self, n: usize) -> String {
        std::fs::read_to_string(self.dir.join(format!("worker-{n}.log"))).unwrap_or_default()
    }

    /// The last lines of a worker's log, for failure messages.
    pub(crate) fn log_tail(&self, n: usize) -> String {
        let log = self.log(n);
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(15)..].join("\n")
    }

    pub(crate) fn kill(&mut self, n: usize) {
        let _ = self.workers[n].kill();
        let _ = self.workers[n].wait();
    }

    pub(crate) async fn enqueue(&self, req: RunRequest) -> RunJob {
        let job = RunJob::new(req, freeway::clock::epoch_ms());
        self.queue.push(std::slice::from_ref(&job)).await.unwrap();
        job
    }

    /// Block until the run's stream carries a last event (`finished`, `refused`,
    /// `awaiting_approval`); returns every event seen, as JSON.
    pub(crate) async fn wait(&self, run_id: &str, timeout: Duration) -> Vec<serde_json::Value> {
        self.wait_for(run_id, timeout, |e| {
            matches!(
                e["type"].as_str(),
                Some("finished" | "refused" | "awaiting_approval")
            )
        })
        .await
    }

    /// Block until the run's stream carries an event for which `done` holds; returns every event
    /// seen up to it, as JSON.
    pub(crate) async fn wait_for(
        &self,
        run_id: &str,
        timeout: Duration,
        done: impl Fn(&serde_json::Value) -> bool,
    ) -> Vec<serde_json::Value> {
        let mut conn = freeway::connect::redis(&self.redis_url).await.unwrap();
        let key = stream_key(&self.ns, run_id);
        let deadline = tokio::time::Instant::now() + timeout;
        let mut last = "0".to_string();
        let mut events = vec![];
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            assert!(
                !left.is_zero(),
                "run {run_id}: no such event in {timeout:?}; events: {events:?}"
            );
            // Short blocks: the connection's response timeout is shorter than a long BLOCK.
            let reply: Option<Vec<StreamReply>> = redis::cmd("XREAD")
                .arg("BLOCK")
                .arg(left.as_millis().min(250) as u64)
                .arg("STREAMS")
                .arg(&key)
                .arg(&last)
                .query_async(&mut conn)
                .await
                .unwrap();
            for (_, entries) in reply.unwrap_or_default() {
                for (id, fields) in entries {
                    last = id;
                    let data = fields
                        .iter()
                        .find(|(k, _)| k == "data")
                        .map(|(_, v)| v.clone())
                        .unwrap_or_default();
                    let event: serde_json::Value = serde_json::from_str(&data).unwrap();
                    let found = done(&event);
                    events.push(event);
                    if found {
                        return events;
                    }
                }
            }
        }
    }

    /// Poll the queue's depths until `done` holds, failing if a worker dies or time runs out.
    pub(crate) async fn watch_queue(
        &self,
        timeout: Duration,
        mut done: impl FnMut(&queue::schedule::Depths) -> bool,
    ) {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let depths = self.queue.depths().await.unwrap();
            if done(&depths) {
                return;
            }
            for n in 0..self.workers.len() {
                let alive = is_running(self.workers[n].id());
                assert!(alive, "worker {n} died: {}", self.log_tail(n));
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "stalled: {depths:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for w in &mut self.workers {
            let _ = w.kill();
            let _ = w.wait();
        }
        // A failed test keeps its logs and database for a look.
        if std::thread::panicking() {
            eprintln!("cluster files kept in {}", self.dir.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// A redis-server of a test's own on a free loopback port, without persistence: a restart or a
/// FLUSHALL loses everything, as a Redis without AOF does. Stopped when dropped.
pub(crate) struct PrivateRedis {
    pub url: String,
    child: Child,
}

impl PrivateRedis {
    /// `None` (said) on a machine without `redis-server`.
    pub(crate) async fn start() -> Option<PrivateRedis> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .unwrap();
        let spawned = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .spawn();
        let mut child = match spawned {
            Ok(child) => child,
            Err(e) => {
                skip::skipped("redis-server", &format!("it does not start ({e})"));
                return None;
            }
        };
        let url = format!("redis://127.0.0.1:{port}");
        let client = redis::Client::open(url.as_str()).unwrap();
        for _ in 0..200 {
            if let Ok(mut conn) = client.get_multiplexed_async_connection().await {
                let pong: Result<String, _> = redis::cmd("PING").query_async(&mut conn).await;
                if pong.is_ok() {
                    return Some(PrivateRedis { url, child });
                }
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        let _ = child.kill();
        let _ = child.wait();
        panic!("redis-server did not start on port {port}");
    }

    pub(crate) async fn flushall(&self) {
        let client = redis::Client::open(self.url.as_str()).unwrap();
        let mut conn = client.get_multiplexed_async_connection().await.unwrap();
        let _: () = redis::cmd("FLUSHALL").query_async(&mut conn).await.unwrap();
    }
}

impl Drop for PrivateRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether a process runs (a dead child not yet reaped is a zombie: not running).
pub(crate) fn is_running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|stat| {
            stat.rsplit_once(") ")
                .is_some_and(|(_, rest)| !rest.starts_with('Z'))
        })
        .unwrap_or(false)
}

/// Run the worker binary once with `args`, extra environment and `stdin`; its output.
pub(crate) fn run_worker(
    args: &[&str],
    env: &[(&str, &str)],
    stdin: &[u8],
) -> std::process::Output {
    use std::io::Write;
    let mut child = Command::new(env!("CARGO_BIN_EXE_worker"))
        .args(args)
        .envs(env.iter().copied())
        .env("RUST_BACKTRACE", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("worker starts");
    // A worker that fails before reading its stdin closes it: that is not the test's concern.
    let written = child.stdin.take().expect("stdin").write_all(stdin);
    if let Err(e) = written {
        assert_eq!(e.kind(), std::io::ErrorKind::BrokenPipe, "write stdin: {e}");
    }
    child.wait_with_output().expect("worker ends")
}

pub(crate) fn request(user: &str, input: &str, models: &[&str]) -> RunRequest {
    RunRequest::new(
        user,
        input,
        models
            .iter()
            .map(|m| RouteSpec::parse_cli(m, &Catalog::builtin()))
            .collect(),
    )
}

pub(crate) fn types(events: &[serde_json::Value]) -> Vec<String> {
    events
        .iter()
        .map(|e| e["type"].as_str().unwrap_or("?").to_string())
        .collect()
}

pub(crate) fn last(events: &[serde_json::Value]) -> &serde_json::Value {
    events.last().expect("events")
}
