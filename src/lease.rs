//! One executor per run at a time, across every replica.
//!
//! A queue can deliver a run twice at once: apalis re-enqueues the jobs of a replica that missed
//! its heartbeats even when that replica is only slow, not dead. Two executors of one run would
//! each spend calls, so the engine holds a lease in Redis while it executes a run: a key with a
//! short TTL, renewed while the run is alive and dropped when it settles. A delivery that finds
//! the lease taken waits for it instead of running; if the holder died, the lease simply expires.

use redis::aio::ConnectionManager;
use std::sync::LazyLock;
use std::time::Duration;

/// How long a lease lives without renewal: what a crashed executor costs its run.
pub const LEASE_TTL: Duration = Duration::from_secs(30);

#[derive(Clone)]
pub struct Leases {
    conn: ConnectionManager,
    ns: String,
}

/// The outcome of asking for a run's lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lease {
    Granted,
    /// Another executor holds it for this much longer.
    HeldFor(Duration),
}

impl Leases {
    pub fn new(conn: ConnectionManager, ns: impl Into<String>) -> Self {
        Self {
            conn,
            ns: ns.into(),
        }
    }

    /// The Redis key of the run's lease.
    pub fn key(&self, run_id: &str) -> String {
        format!("{}:run:{run_id}:lease", self.ns)
    }

    /// Take the run's lease for `owner`, or say how long another holder keeps it.
    pub async fn acquire(&self, run_id: &str, owner: &str) -> Result<Lease, redis::RedisError> {
        let mut conn = self.conn.clone();
        let held_ms: i64 = ACQUIRE
            .key(self.key(run_id))
            .arg(owner)
            .arg(LEASE_TTL.as_millis() as u64)
            .invoke_async(&mut conn)
            .await?;
        Ok(if held_ms <= 0 {
            Lease::Granted
        } else {
            Lease::HeldFor(Duration::from_millis(held_ms as u64))
        })
    }

    /// Extend the lease while `owner` still holds it; false when it was lost.
    pub async fn renew(&self, run_id: &str, owner: &str) -> Result<bool, redis::RedisError> {
        let mut conn = self.conn.clone();
        let renewed: i64 = RENEW
            .key(self.key(run_id))
            .arg(owner)
            .arg(LEASE_TTL.as_millis() as u64)
            .invoke_async(&mut conn)
            .await?;
        Ok(renewed == 1)
    }

    /// Drop the lease if `owner` holds it.
    pub async fn release(&self, run_id: &str, owner: &str) -> Result<(), redis::RedisError> {
        let mut conn = self.conn.clone();
        RELEASE
            .key(self.key(run_id))
            .arg(owner)
            .invoke_async::<i64>(&mut conn)
            .await
            .map(|_| ())
    }
}

/// Returns 0 when granted, else the holder's remaining ms. Owners are unique per delivery, so a
/// held lease is always another's.
static ACQUIRE: LazyLock<redis::Script> = LazyLock::new(|| {
    redis::Script::new(
        r"
        if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 0 end
        return math.max(redis.call('PTTL', KEYS[1]), 1)
        ",
    )
});

static RENEW: LazyLock<redis::Script> = LazyLock::new(|| {
    redis::Script::new(
        r"
        if redis.call('GET', KEYS[1]) == ARGV[1] then
            redis.call('PEXPIRE', KEYS[1], ARGV[2])
            return 1
        end
        return 0
        ",
    )
});

static RELEASE: LazyLock<redis::Script> = LazyLock::new(|| {
    redis::Script::new(
        r"
        if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
        return 0
        ",
    )
});
