//! The fleet's health as `/healthz` reports it: Redis taking writes, and every replica's store
//! writer taking writes.
//!
//! A producer that probes only itself says "ok" while a worker's writer fails ("database or
//! disk is full") and every run it finishes loses its answer; a `PING` says "ok" while Redis
//! refuses writes at `maxmemory`. So each replica probes its own writer every few seconds and
//! reports the result under its name in one Redis hash, and the health check probes Redis with a
//! write and reads every report younger than [`REPORT_FRESH_MS`].
//!
//! | key | what | TTL |
//! |---|---|---|
//! | `{ns}:health:writers` | replica name → `{"t_ms", "error"?}` of its last writer probe | reports older than [`REPORT_FRESH_MS`] are dropped when read |
//! | `{ns}:health:probe` | the last write probe | 60 s |

use crate::FleetError;
use freeway::connect::RedisConnection;
use redis::AsyncCommands;
use serde::{Deserialize, Serialize};

/// How often a replica probes its writer.
pub const PROBE_EVERY: std::time::Duration = std::time::Duration::from_secs(5);
/// A report older than this is a replica that stopped (or cannot reach Redis): not counted.
pub const REPORT_FRESH_MS: u64 = 30_000;
/// The longest error text a report keeps.
const ERROR_MAX: usize = 512;

/// What one replica last saw of its store writer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Report {
    t_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

/// The fleet's health at one moment.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FleetHealth {
    /// Replicas whose last writer probe failed, with the error.
    pub failing_writers: Vec<(String, String)>,
}

/// Reads and writes the health reports of one namespace.
#[derive(Clone)]
pub struct Health {
    conn: RedisConnection,
    ns: String,
}

impl Health {
    /// The health of the fleet in namespace `ns` of the Redis `conn`.
    pub fn new(conn: RedisConnection, ns: &str) -> Health {
        Health {
            conn,
            ns: ns.to_string(),
        }
    }

    /// Whether Redis takes a write now (a `PING` answers at `maxmemory` too).
    pub async fn redis_writable(&self) -> Result<(), FleetError> {
        let mut conn = self.conn.clone();
        let key = format!("{}:health:probe", self.ns);
        conn.pset_ex::<_, _, ()>(key, freeway::clock::epoch_ms(), 60_000)
            .await?;
        Ok(())
    }

    /// Report what `replica`'s writer probe gave.
    pub async fn report_writer(
        &self,
        replica: &str,
        probe: Result<(), String>,
    ) -> Result<(), FleetError> {
        let report = Report {
            t_ms: freeway::clock::epoch_ms(),
            error: probe.err().map(|e| freeway::text::cut(&e, ERROR_MAX)),
        };
        let text = serde_json::to_string(&report).unwrap_or_default();
        let mut conn = self.conn.clone();
        conn.hset::<_, _, _, ()>(self.writers_key(), replica, text)
            .await?;
        Ok(())
    }

    /// The recent reports; stale ones are deleted on the way.
    pub async fn fleet(&self) -> Result<FleetHealth, FleetError> {
        let mut conn = self.conn.clone();
        let reports: Vec<(String, String)> = conn.hgetall(self.writers_key()).await?;
        let now = freeway::clock::epoch_ms();
        let mut health = FleetHealth::default();
        let mut stale = Vec::new();
        for (replica, text) in reports {
            match serde_json::from_str::<Report>(&text) {
                Ok(r) if now.saturating_sub(r.t_ms) <= REPORT_FRESH_MS => {
                    if let Some(error) = r.error {
                        health.failing_writers.push((replica, error));
                    }
                }
                _ => stale.push(replica),
            }
        }
        if !stale.is_empty() {
            conn.hdel::<_, _, ()>(self.writers_key(), stale).await?;
        }
        health.failing_writers.sort();
        Ok(health)
    }

    fn writers_key(&self) -> String {
        format!("{}:health:writers", self.ns)
    }
}
