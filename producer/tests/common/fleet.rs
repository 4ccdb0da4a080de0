//! A whole fleet as processes, for end-to-end tests of what people and operators see: the
//! simulator in-process, `producer serve` and worker replicas as child processes of the built
//! binaries, a real Redis (`REDIS_URL`) and one SQLite store in a temp folder. Every process
//! logs to its own file in that folder; a failed test keeps the folder for a look.
//!
//! The worker binary is the workspace's `target/…/worker`, beside the producer's: `cargo test
//! --workspace` (the test command) builds both. A test run of this package alone needs
//! `cargo build -p worker` first, and says so.

use super::skip::redis_url;
use super::{JsonBody, json_of, skip, unique};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub(crate) const PLATFORM_KEY: &str = "sk-or-v1-fleet-platform-key-7d1c0a55";
pub(crate) const API_TOKEN: &str = "fw-api-token-5be3c1f09a";
pub(crate) const ADMIN_TOKEN: &str = "fw-admin-token-c4e18d2b77";
/// `FREEWAY_SECRET_KEY` (seals users' keys): a secret too.
pub(crate) const SECRET_KEY: &str =
    "397e71bb7869e794e09c90cb524a17a4af0389a5e1a66992c8a7d5e728862043";

/// How a fleet's processes log.
#[derive(Clone, Copy)]
pub(crate) struct Logging {
    pub rust_log: &'static str,
    pub json: bool,
}

impl Default for Logging {
    fn default() -> Logging {
        Logging {
            rust_log: "info",
            json: false,
        }
    }
}

pub(crate) struct Fleet {
    pub ns: String,
    pub dir: PathBuf,
    pub db_url: String,
    pub sim: sim::SimHandle,
    /// The producer's base URL, `http://127.0.0.1:PORT`.
    pub base: String,
    pub http: reqwest::Client,
    logging: Logging,
    /// More variables for every process (a configuration file, providers' keys).
    env: Vec<(String, String)>,
    children: Vec<(String, Child)>,
}

/// The workspace's target folder (where the binaries and the board's screenshot go).
pub(crate) fn target_dir() -> PathBuf {
    let producer = Path::new(env!("CARGO_BIN_EXE_producer"));
    producer
        .ancestors()
        .nth(2)
        .map_or_else(|| PathBuf::from("target"), Path::to_path_buf)
}

/// `FREEWAY_CONFIG` naming a file of `toml` in a folder of its own, for a fleet's environment.
pub(crate) fn config_file(name: &str, toml: &str) -> (String, String) {
    let dir = std::env::temp_dir().join(super::unique(&format!("freeway-{name}")));
    std::fs::create_dir_all(&dir).expect("a temp dir");
    let path = dir.join("freeway.toml");
    std::fs::write(&path, toml).expect("the configuration file");
    ("FREEWAY_CONFIG".into(), path.display().to_string())
}

fn worker_bin() -> PathBuf {
    let bin = Path::new(env!("CARGO_BIN_EXE_producer")).with_file_name("worker");
    assert!(
        bin.exists(),
        "{} is missing: build it with `cargo build -p worker` (`cargo test --workspace` does)",
        bin.display()
    );
    bin
}

pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

impl Fleet {
    /// The simulator, `producer serve` with both tokens, and `workers` worker replicas; `None`
    /// (said) without a Redis for them.
    pub(crate) async fn start(
        name: &str,
        sim_config: sim::SimConfig,
        workers: usize,
        logging: Logging,
    ) -> Option<Fleet> {
        Fleet::start_with(name, sim_config, workers, logging, |_| Vec::new()).await
    }

    /// [`Fleet::start`], every process also getting the variables `env` makes from the
    /// simulator (its base URLs, for a configuration file).
    pub(crate) async fn start_with(
        name: &str,
        sim_config: sim::SimConfig,
        workers: usize,
        logging: Logging,
        env: impl FnOnce(&sim::SimHandle) -> Vec<(String, String)>,
    ) -> Option<Fleet> {
        freeway::provider::install_crypto();
        // Every process of the fleet needs it.
        skip::redis().await?;
        let ns = unique(&format!("fleet-{name}"));
        let dir = std::env::temp_dir().join(&ns);
        std::fs::create_dir_all(&dir).expect("a temp dir");
        let db_url = format!("sqlite://{}", dir.join("freeway.db").display());
        // Migrate once before the processes start, so none of them races to.
        freeway::store::SqlStore::open(&db_url)
            .await
            .expect("the store opens")
            .close()
            .await;
        let sim = sim::start(sim_config, "127.0.0.1:0".parse().expect("an address"))
            .await
            .expect("the simulator starts");
        let port = free_port();
        let env = env(&sim);
        let mut fleet = Fleet {
            ns,
            dir,
            db_url,
            sim,
            base: format!("http://127.0.0.1:{port}"),
            http: reqwest::Client::new(),
            logging,
            env,
            children: Vec::new(),
        };
        let addr = format!("127.0.0.1:{port}");
        fleet.spawn(
            "producer",
            Path::new(env!("CARGO_BIN_EXE_producer")),
            &["serve", "--addr", &addr],
        );
        for _ in 0..workers {
            fleet.add_worker();
        }
        fleet.wait_healthy().await;
        Some(fleet)
    }

    /// Kill `name` at once (SIGKILL), as a crash or the OOM killer would, and reap it.
    pub(crate) fn kill9(&mut self, name: &str) {
        if let Some(i) = self.children.iter().position(|(n, _)| n == name) {
            let (_, mut child) = self.children.remove(i);
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// `producer serve` again on the fleet's address, as `name` (after [`Fleet::kill9`]).
    pub(crate) async fn restart_producer(&mut self, name: &str) {
        let addr = self.base.trim_start_matches("http://").to_string();
        self.spawn(
            name,
            Path::new(env!("CARGO_BIN_EXE_producer")),
            &["serve", "--addr", &addr],
        );
        self.wait_healthy().await;
    }

    /// A second `producer serve`, `name`, on a port of its own beside the first, sharing the
    /// fleet's Redis and store; returns its base URL once it is healthy.
    pub(crate) async fn add_producer(&mut self, name: &str) -> String {
        let addr = format!("127.0.0.1:{}", free_port());
        self.spawn(
            name,
            Path::new(env!("CARGO_BIN_EXE_producer")),
            &["serve", "--addr", &addr],
        );
        let base = format!("http://{addr}");
        self.wait_healthy_at(&base).await;
        base
    }

    /// The process id of `name`.
    pub(crate) fn pid(&self, name: &str) -> u32 {
        self.children
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, c)| c.id())
            .unwrap_or_else(|| panic!("no process {name}"))
    }

    /// Limit the file size of the process `name` (`prlimit --pid --fsize`, `soft:hard`): at
    /// `1:unlimited` its next write to the store fails as on a full disk (the binaries handle
    /// SIGXFSZ); `unlimited:unlimited` gives the room back. Only that process is limited.
    pub(crate) fn limit_file_size(&self, name: &str, limit: &str) {
        let status = Command::new("prlimit")
            .args([
                "--pid",
                &self.pid(name).to_string(),
                &format!("--fsize={limit}"),
            ])
            .status()
            .expect("prlimit (util-linux) on PATH");
        assert!(status.success(), "prlimit --fsize={limit} of {name}");
    }

    /// One more worker replica, `worker-N`.
    pub(crate) fn add_worker(&mut self) {
        let n = self
            .children
            .iter()
            .filter(|(n, _)| n.starts_with("worker-"))
            .count();
        self.spawn(
            &format!("worker-{n}"),
            &worker_bin(),
            &["--heartbeat-s", "1", "--grace-s", "5", "--concurrency", "8"],
        );
    }

    fn spawn(&mut self, name: &str, bin: &Path, args: &[&str]) {
        let log = std::fs::File::create(self.dir.join(format!("{name}.log"))).expect("a log file");
        let child = Command::new(bin)
            .args(args)
            .env("REDIS_URL", redis_url())
            .env("DATABASE_URL", &self.db_url)
            .env("FREEWAY_NAMESPACE", &self.ns)
            .env("OPENROUTER_BASE_URL", self.sim.base_url())
            .env("OPENROUTER_API_KEY", PLATFORM_KEY)
            .env("FREEWAY_API_TOKEN", API_TOKEN)
            .env("FREEWAY_ADMIN_TOKEN", ADMIN_TOKEN)
            .env("FREEWAY_SECRET_KEY", SECRET_KEY)
            .env("RUST_LOG", self.logging.rust_log)
            .env(
                "FREEWAY_LOG_FORMAT",
                if self.logging.json { "json" } else { "pretty" },
            )
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .env_remove("RUST_BACKTRACE")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", bin.display()));
        self.children.push((name.to_string(), child));
    }

    async fn wait_healthy(&mut self) {
        let base = self.base.clone();
        self.wait_healthy_at(&base).await;
    }

    async fn wait_healthy_at(&mut self, base: &str) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(r) = self.http.get(format!("{base}/healthz")).send().await
                && r.status().is_success()
            {
                return;
            }
            let exited = self
                .children
                .iter_mut()
                .find_map(|(name, child)| Some((name.clone(), child.try_wait().ok()??)));
            if let Some((name, status)) = exited {
                panic!("{name} exited ({status}): {}", self.log_of(&name));
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the producer at {base} did not answer /healthz: {}",
                self.log_of("producer")
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    pub(crate) fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// Every process's log so far, by process name.
    pub(crate) fn logs(&self) -> Vec<(String, String)> {
        self.children
            .iter()
            .map(|(name, _)| (name.clone(), self.log_of(name)))
            .collect()
    }

    pub(crate) fn log_of(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.join(format!("{name}.log"))).unwrap_or_default()
    }

    /// Stop every process with SIGTERM (a graceful shutdown, so the logs are complete) and wait.
    pub(crate) async fn stop(&mut self) {
        for (_, child) in &mut self.children {
            let _ = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status();
        }
        let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
        for (_, child) in &mut self.children {
            while matches!(child.try_wait(), Ok(None)) && tokio::time::Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// An API call with the API token: `(status, JSON body)`.
    pub(crate) async fn call(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
    ) -> (u16, Value) {
        let method = reqwest::Method::from_bytes(method.as_bytes()).expect("a method");
        let mut req = self
            .http
            .request(method, self.url(path))
            .bearer_auth(API_TOKEN);
        if let Some(b) = body {
            req = req.json_body(b);
        }
        let resp = req.send().await.expect("the producer answers");
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap_or_default();
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    /// Enqueue a run; returns its id.
    pub(crate) async fn enqueue(&self, body: Value) -> String {
        let (status, reply) = self.call("POST", "/v1/runs", Some(&body)).await;
        assert_eq!(status, 202, "POST /v1/runs {body}: {reply}");
        reply["run_id"].as_str().expect("a run id").to_string()
    }

    /// Wait for the run to settle (succeeded, failed, refused, awaiting approval); returns it.
    pub(crate) async fn settled(&self, run_id: &str, timeout: Duration) -> Value {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let (status, run) = self.call("GET", &format!("/v1/runs/{run_id}"), None).await;
            assert_eq!(status, 200, "{run}");
            if matches!(
                run["status"].as_str(),
                Some("succeeded" | "failed" | "refused" | "awaiting_approval")
            ) {
                return run;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "run {run_id} did not settle in {timeout:?}: {run}\n{}",
                self.log_of("worker-0")
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The Prometheus text of `/metrics`.
    pub(crate) async fn metrics(&self) -> String {
        let resp = self
            .http
            .get(self.url("/metrics"))
            .bearer_auth(API_TOKEN)
            .send()
            .await
            .expect("GET /metrics");
        assert_eq!(resp.status().as_u16(), 200);
        resp.text().await.expect("text")
    }

    /// `/metrics` once `series` reads `value`: a replica writes its counts within a tick of
    /// counting them.
    pub(crate) async fn metrics_showing(&self, series: &str, value: f64) -> String {
        self.metrics_when(|text| sample(text, series) == Some(value))
            .await
    }

    /// `/metrics` once `shows` holds of it, or after 5 s (the caller's assertions say what is
    /// missing).
    pub(crate) async fn metrics_when(&self, shows: impl Fn(&str) -> bool) -> String {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        loop {
            let text = self.metrics().await;
            if shows(&text) || tokio::time::Instant::now() > deadline {
                return text;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// `GET path` until its answer `holds`, at most 30 s.
    pub(crate) async fn json_when(&self, path: &str, holds: impl Fn(&Value) -> bool) -> Value {
        self.json_within(path, Duration::from_secs(30), holds).await
    }

    /// The answer to `GET path` once `holds`, polled until `timeout`.
    pub(crate) async fn json_within(
        &self,
        path: &str,
        timeout: Duration,
        holds: impl Fn(&Value) -> bool,
    ) -> Value {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let answer = self.json(path).await;
            if holds(&answer) {
                return answer;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "GET {path} never showed it: {answer}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Store `n` failed runs on `model`, of users `seed0`..`seed6` in turn, a millisecond apart
    /// an hour ago, as a burst long past would leave them; each kept with its job, as the
    /// producer keeps a run, so a retry can read its request. Returns their ids.
    pub(crate) async fn seed_failed_runs(&self, n: usize, model: &str) -> Vec<String> {
        use freeway::store::Store;
        let store = freeway::store::SqlStore::open(&self.db_url)
            .await
            .expect("the store");
        let now = freeway::clock::epoch_ms();
        let mut ids = Vec::with_capacity(n);
        for i in 0..n {
            let body = serde_json::json!({
                "user_id": format!("seed{}", i % 7), "input": "old", "routes": [{ "model": model }]
            });
            let request = freeway::job::RunRequest::from_json(
                body.to_string().as_bytes(),
                &freeway::catalog::Catalog::builtin(),
            )
            .expect("a request");
            let job = freeway::job::RunJob::new(request, now - 3_600_000 + i as u64);
            store
                .create_queued(&job, job.enqueued_ms)
                .await
                .expect("a seeded run");
            let mut rec = freeway::run::RunRecord::queued(&job, job.enqueued_ms);
            rec.status = freeway::run::RunStatus::Failed;
            rec.code = Some(freeway::run::Code::RoutesExhausted);
            store.save_run(&rec).await.expect("a seeded run");
            ids.push(job.run_id);
        }
        store.close().await;
        ids
    }

    pub(crate) async fn json(&self, path: &str) -> Value {
        let resp = self
            .http
            .get(self.url(path))
            .bearer_auth(API_TOKEN)
            .send()
            .await
            .expect("GET");
        json_of(resp).await
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        for (_, child) in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
        if std::thread::panicking() {
            eprintln!("fleet files kept in {}", self.dir.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// The value of one sample line (`name{labels} value`) in Prometheus text; `None` when absent.
pub(crate) fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|l| {
        l.strip_prefix(series)?
            .strip_prefix(' ')?
            .trim()
            .parse()
            .ok()
    })
}
