//! `producer serve` as a scenario's process: started beside the scenario's workers on the same
//! Redis namespace and store, ready once `/healthz` answers, stopped when the scenario ends
//! however it ends.

use crate::args::{Args, BoxError};
use crate::cluster::Cluster;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The API token the scenarios' producer takes.
pub(crate) const API_TOKEN: &str = "load-api-token-3f9c0a7e";
/// Its admin token, for the operator's reads.
pub(crate) const ADMIN_TOKEN: &str = "load-admin-token-91d2b7c4";

/// A running `producer serve` (the binary next to the worker), and a client for it.
pub(crate) struct Producer {
    child: Child,
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    pub http: reqwest::Client,
}

impl Producer {
    pub(crate) async fn start(
        worker: &Path,
        args: &Args,
        cluster: &Cluster,
    ) -> Result<Producer, BoxError> {
        let bin = worker.with_file_name("producer");
        if !bin.is_file() {
            return Err(format!(
                "the producer binary is missing at {}: build it with `cargo build --release -p \
                 producer --bin producer`",
                bin.display()
            )
            .into());
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let child = Command::new(&bin)
            .args(["serve", "--addr", &format!("127.0.0.1:{port}")])
            .env("REDIS_URL", &args.redis_url)
            .env("DATABASE_URL", cluster.db_url())
            .env("FREEWAY_NAMESPACE", cluster.namespace())
            .env("FREEWAY_API_TOKEN", API_TOKEN)
            .env("FREEWAY_ADMIN_TOKEN", ADMIN_TOKEN)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", bin.display()))?;
        freeway::provider::install_crypto();
        let mut producer = Producer {
            child,
            base: format!("http://127.0.0.1:{port}"),
            http: reqwest::Client::new(),
        };
        producer.ready().await?;
        Ok(producer)
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Wait for `/healthz`, failing fast if the process exited.
    async fn ready(&mut self) -> Result<(), BoxError> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = self.child.try_wait()? {
                return Err(format!("producer serve exited: {status}").into());
            }
            let healthz = self.http.get(format!("{}/healthz", self.base)).send();
            if let Ok(resp) = healthz.await
                && resp.status().is_success()
            {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err("producer serve did not answer /healthz within 30 s".into());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for Producer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
