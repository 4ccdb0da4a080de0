//! What a run's executor could not store, kept in Redis until the store takes it.
//!
//! A call is paid for once it is answered. When the save that follows fails (PostgreSQL
//! restarting, a full disk), the delivery fails and the run is delivered again; without the
//! answer in the store, the next executor would call again and pay again. So a save that fails
//! leaves its writes here, and the next delivery of the run stores them before anything else: it
//! resumes after the answer instead of buying it twice (docs/design.md §6).
//!
//! | key | what | TTL |
//! |---|---|---|
//! | `{ns}:run:{run_id}:unsaved` | the run record and the writes of its last failed save (JSON) | a day past the run's deadline |

use crate::connect::RedisConnection;
use crate::error::FleetError;
use async_trait::async_trait;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

/// Writes a store did not take, by run.
#[async_trait]
pub trait Unsaved: Send + Sync {
    /// Keep `writes` (JSON) for `run_id` for `ttl`, in place of any kept before.
    async fn keep(&self, run_id: &str, writes: &str, ttl: Duration) -> Result<(), FleetError>;
    /// What is kept for `run_id`.
    async fn kept(&self, run_id: &str) -> Result<Option<String>, FleetError>;
    /// The store took them: forget them.
    async fn clear(&self, run_id: &str) -> Result<(), FleetError>;
}

/// The writes in Redis, one key per run.
#[derive(Clone)]
pub struct RedisUnsaved {
    conn: RedisConnection,
    ns: String,
}

impl RedisUnsaved {
    pub fn new(conn: RedisConnection, ns: &str) -> RedisUnsaved {
        RedisUnsaved {
            conn,
            ns: ns.to_string(),
        }
    }

    fn key(&self, run_id: &str) -> String {
        format!("{}:run:{run_id}:unsaved", self.ns)
    }
}

#[async_trait]
impl Unsaved for RedisUnsaved {
    async fn keep(&self, run_id: &str, writes: &str, ttl: Duration) -> Result<(), FleetError> {
        let mut conn = self.conn.clone();
        let _: () = redis::cmd("SET")
            .arg(self.key(run_id))
            .arg(writes)
            .arg("PX")
            .arg(ttl.as_millis().max(1) as u64)
            .query_async(&mut conn)
            .await?;
        Ok(())
    }

    async fn kept(&self, run_id: &str) -> Result<Option<String>, FleetError> {
        let mut conn = self.conn.clone();
        Ok(redis::cmd("GET")
            .arg(self.key(run_id))
            .query_async(&mut conn)
            .await?)
    }

    async fn clear(&self, run_id: &str) -> Result<(), FleetError> {
        let mut conn = self.conn.clone();
        let _: () = redis::cmd("DEL")
            .arg(self.key(run_id))
            .query_async(&mut conn)
            .await?;
        Ok(())
    }
}

/// The writes in this process (tests); they do not expire.
#[derive(Default)]
pub struct MemoryUnsaved {
    kept: Mutex<HashMap<String, String>>,
}

#[async_trait]
impl Unsaved for MemoryUnsaved {
    async fn keep(&self, run_id: &str, writes: &str, _ttl: Duration) -> Result<(), FleetError> {
        let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        kept.insert(run_id.to_string(), writes.to_string());
        Ok(())
    }

    async fn kept(&self, run_id: &str) -> Result<Option<String>, FleetError> {
        let kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        Ok(kept.get(run_id).cloned())
    }

    async fn clear(&self, run_id: &str) -> Result<(), FleetError> {
        let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        kept.remove(run_id);
        Ok(())
    }
}
