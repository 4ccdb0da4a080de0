//! What a scenario runs on: the simulator on a thread of its own, a fresh namespace and store
//! (a SQLite file, or a PostgreSQL database with `--postgres`), worker processes, and the cleanup
//! that leaves Redis, PostgreSQL and the temp folder as they were.

use crate::args::{Args, BoxError};
use freeway::connect::RedisConnection;
use freeway::store::SqlStore;
use queue::Queue;
use sqlx::Connection;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

const PLATFORM_KEY: &str = "sk-or-v1-load-platform-key";

/// The simulator, served by a single-threaded runtime on its own thread: it gets a core of its
/// own instead of competing with the benchmark's polling for the main runtime's threads.
pub(crate) struct Sim {
    handle: Option<sim::SimHandle>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// The sim thread's id, to read its CPU time from /proc.
    pub tid: Option<u32>,
}

impl Sim {
    pub(crate) fn start(config: sim::SimConfig) -> Result<Sim, BoxError> {
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("sim".into())
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(r) => r,
                    Err(e) => {
                        let _ = ready_tx.send(Err(format!("sim runtime: {e}")));
                        return;
                    }
                };
                runtime.block_on(async move {
                    let addr = "127.0.0.1:0".parse().expect("a socket address");
                    let started = sim::start(config, addr)
                        .await
                        .map(|h| (h, thread_id()))
                        .map_err(|e| format!("cannot start the simulator: {e}"));
                    let ok = started.is_ok();
                    let _ = ready_tx.send(started);
                    // The server task runs on this runtime: keep it turning until told to stop.
                    if ok {
                        let _ = stop_rx.await;
                    }
                });
            })?;
        let (handle, tid) = ready_rx
            .recv()
            .map_err(|_| "the simulator thread ended before starting")??;
        Ok(Sim {
            handle: Some(handle),
            stop: Some(stop_tx),
            thread: Some(thread),
            tid,
        })
    }

    pub(crate) fn handle(&self) -> &sim::SimHandle {
        self.handle.as_ref().expect("the simulator runs until stop")
    }

    pub(crate) async fn stop(mut self) {
        if let Some(h) = self.handle.take() {
            h.shutdown().await;
        }
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// This thread's kernel id (from the `/proc/thread-self` link, `PID/task/TID`).
fn thread_id() -> Option<u32> {
    let link = std::fs::read_link("/proc/thread-self").ok()?;
    link.file_name()?.to_str()?.parse().ok()
}

/// A namespace with its store, its queue and its worker processes.
pub(crate) struct Cluster {
    ns: String,
    pub dir: PathBuf,
    db_url: String,
    /// With `--postgres`: the admin URL and the database made for this scenario.
    pg_database: Option<(String, String)>,
    redis_url: String,
    pub conn: RedisConnection,
    pub queue: Queue,
    pub store: SqlStore,
    workers: Vec<Child>,
}

/// Run `scenario` on a fresh cluster beside `sim`, then clean both up whatever happened.
pub(crate) async fn with_cluster<T>(
    sim: Sim,
    args: &Args,
    name: &str,
    scenario: impl AsyncFnOnce(&Sim, &mut Cluster) -> Result<T, BoxError>,
) -> Result<T, BoxError> {
    let result = match Cluster::start(&args.redis_url, name, args.postgres.as_deref()).await {
        Ok(cluster) => {
            let mut cluster = cluster.with_queues(args.queues);
            let result = scenario(&sim, &mut cluster).await;
            cluster.close(args.keep || result.is_err()).await;
            result
        }
        Err(e) => Err(e),
    };
    sim.stop().await;
    result
}

impl Cluster {
    pub(crate) async fn start(
        redis_url: &str,
        scenario: &str,
        postgres: Option<&str>,
    ) -> Result<Cluster, BoxError> {
        let ns = fresh_namespace(scenario);
        let dir = std::env::temp_dir().join(&ns);
        std::fs::create_dir_all(&dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let (db_url, pg_database) = match postgres {
            Some(admin) => {
                let name = ns.replace('-', "_");
                pg_admin(admin, &format!("CREATE DATABASE {name}")).await?;
                (database_url(admin, &name)?, Some((admin.to_string(), name)))
            }
            None => (
                format!("sqlite://{}", dir.join("freeway.db").display()),
                None,
            ),
        };
        // Opened here first so the migrations are done before any worker starts.
        let store = SqlStore::open(&db_url).await?;
        let conn = freeway::connect::redis(redis_url).await?;
        let queue = Queue::new(conn.clone(), &ns);
        Ok(Cluster {
            ns,
            dir,
            db_url,
            pg_database,
            redis_url: redis_url.to_string(),
            conn,
            queue,
            store,
            workers: vec![],
        })
    }

    /// Start `replicas` worker processes on the simulator at `sim_url`, each also getting
    /// `env` (a `FREEWAY_CONFIG`, …); each logs to `worker-N.log`.
    pub(crate) fn spawn_workers(
        &mut self,
        bin: &Path,
        replicas: u16,
        concurrency: u16,
        sim_url: &str,
        env: &[(&str, &str)],
    ) -> Result<(), BoxError> {
        // Per-run info lines would cost the workers CPU the benchmark should measure elsewhere.
        let log_level = std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into());
        for _ in 0..replicas {
            let path = self.dir.join(format!("worker-{}.log", self.workers.len()));
            let log = std::fs::File::create(&path)
                .map_err(|e| format!("cannot create {}: {e}", path.display()))?;
            let child = Command::new(bin)
                .args(["--concurrency", &concurrency.to_string()])
                .args(["--heartbeat-s", "10", "--grace-s", "5"])
                .env("REDIS_URL", &self.redis_url)
                .env("DATABASE_URL", &self.db_url)
                .env("FREEWAY_NAMESPACE", &self.ns)
                .env("OPENROUTER_BASE_URL", sim_url)
                .env("OPENROUTER_API_KEY", PLATFORM_KEY)
                .env("RUST_LOG", &log_level)
                .env("FREEWAY_QUEUES", self.queue.lanes().to_string())
                .envs(env.iter().copied())
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .map_err(|e| format!("cannot start {}: {e}", bin.display()))?;
            self.workers.push(child);
        }
        Ok(())
    }

    /// The scenario's replicas (`--replicas` × `--concurrency`) on `sim`, each also getting
    /// `env`.
    pub(crate) fn spawn_fleet(
        &mut self,
        bin: &Path,
        args: &Args,
        sim: &Sim,
        env: &[(&str, &str)],
    ) -> Result<(), BoxError> {
        let url = sim.handle().base_url();
        let mut env = env.to_vec();
        if args.http2 {
            env.push(("FREEWAY_HTTP2", "prior-knowledge"));
        }
        self.spawn_workers(bin, args.replicas, args.concurrency, &url, &env)
    }

    /// Spread the runs over `queues` queue names, here and in the workers it starts.
    pub(crate) fn with_queues(mut self, queues: u16) -> Cluster {
        self.queue = self.queue.clone().with_lanes(usize::from(queues));
        self
    }

    pub(crate) fn db_url(&self) -> &str {
        &self.db_url
    }

    pub(crate) fn namespace(&self) -> &str {
        &self.ns
    }

    pub(crate) fn worker_pids(&self) -> Vec<u32> {
        self.workers.iter().map(Child::id).collect()
    }

    /// An error naming the first worker that exited, with the end of its log: a replica that
    /// dies would otherwise show up only as a timeout.
    pub(crate) fn check_workers(&mut self) -> Result<(), BoxError> {
        for (n, w) in self.workers.iter_mut().enumerate() {
            if let Some(status) = w.try_wait()? {
                let log = std::fs::read_to_string(self.dir.join(format!("worker-{n}.log")))
                    .unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(10).collect();
                let tail: Vec<&str> = tail.into_iter().rev().collect();
                return Err(format!(
                    "worker {n} exited ({status}); the end of its log:\n{}",
                    tail.join("\n")
                )
                .into());
            }
        }
        Ok(())
    }

    /// Kill the workers and delete the namespace's keys and the temp folder; after a failure
    /// (`keep_files`) the folder stays, with the workers' logs and the store.
    pub(crate) async fn close(mut self, keep_files: bool) {
        for w in &mut self.workers {
            let _ = w.kill();
            let _ = w.wait();
        }
        self.workers.clear();
        self.store.close().await;
        if let Some((admin, name)) = &self.pg_database {
            let drop = format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)");
            if let Err(e) = pg_admin(admin, &drop).await {
                eprintln!("load: could not drop the database {name}: {e}");
            }
        }
        if let Err(e) = delete_namespace(&mut self.conn, &self.ns).await {
            eprintln!("load: could not delete the keys of {}: {e}", self.ns);
        }
        if keep_files {
            eprintln!(
                "load: workers' logs and store kept in {}",
                self.dir.display()
            );
        } else if let Err(e) = std::fs::remove_dir_all(&self.dir) {
            eprintln!("load: could not remove {}: {e}", self.dir.display());
        }
    }
}

impl Drop for Cluster {
    /// A benchmark that panics must not leave replicas running (the keys stay; they are named).
    fn drop(&mut self) {
        for w in &mut self.workers {
            let _ = w.kill();
            let _ = w.wait();
        }
    }
}

/// Run one statement on the PostgreSQL server of `admin` (a database URL the user may create
/// databases with).
async fn pg_admin(admin: &str, statement: &str) -> Result<(), BoxError> {
    let mut conn = sqlx::PgConnection::connect(admin)
        .await
        .map_err(|e| format!("cannot reach --postgres: {e}"))?;
    sqlx::raw_sql(sqlx::AssertSqlSafe(statement.to_string()))
        .execute(&mut conn)
        .await
        .map_err(|e| format!("{statement}: {e}"))?;
    Ok(())
}

/// `admin` with its database replaced by `name`.
fn database_url(admin: &str, name: &str) -> Result<String, BoxError> {
    let (base, query) = admin.split_once('?').unwrap_or((admin, ""));
    let server = base
        .strip_prefix("postgres://")
        .or_else(|| base.strip_prefix("postgresql://"))
        .ok_or("--postgres must be a postgres:// URL")?;
    let server = server.split_once('/').map_or(server, |(server, _)| server);
    let query = if query.is_empty() {
        String::new()
    } else {
        format!("?{query}")
    };
    Ok(format!("postgres://{server}/{name}{query}"))
}

pub(crate) fn fresh_namespace(scenario: &str) -> String {
    format!(
        "load-{scenario}-{}",
        ulid::Ulid::generate().to_string().to_lowercase()
    )
}

/// Every key of the namespace (`{ns}:…`), and apalis's entry for its queue in the global list.
pub(crate) async fn delete_namespace(conn: &mut RedisConnection, ns: &str) -> Result<(), BoxError> {
    let mut cursor: u64 = 0;
    loop {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(format!("{ns}:*"))
            .arg("COUNT")
            .arg(1000)
            .query_async(conn)
            .await?;
        if !keys.is_empty() {
            redis::cmd("UNLINK")
                .arg(&keys)
                .query_async::<()>(conn)
                .await?;
        }
        if next == 0 {
            break;
        }
        cursor = next;
    }
    let lanes = queue::lane::lane_names(ns, queue::lane::MAX_LANES, conn.is_cluster());
    let workers: Vec<String> = lanes.iter().map(|lane| format!("{lane}:workers")).collect();
    redis::cmd("ZREM")
        .arg(queue::lane::APALIS_REGISTRY)
        .arg(workers)
        .query_async::<()>(conn)
        .await?;
    Ok(())
}
