//! One executor per run at a time, across every replica.
//!
//! A queue can deliver a run twice at once: apalis re-enqueues the jobs of a replica that missed
//! its heartbeats even when that replica is only slow, not dead. Two executors of one run would
//! each spend calls, so the engine holds a lease in Redis while it executes a run: a key with a
//! short TTL, renewed while the run is alive and dropped when it settles. A delivery that finds
//! the lease taken waits for it instead of running; if the holder died, the lease simply expires.
//!
//! [`RedisLeases`] is the fleet's; [`MemoryLeases`] keeps the same rules in one process for tests
//! that need no server.

use crate::clock::{Clock, SystemClock};
use crate::connect::RedisConnection;
use crate::error::FleetError;
use async_trait::async_trait;
use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

/// How long a lease lives without renewal: what a crashed executor costs its run.
pub const LEASE_TTL: Duration = Duration::from_secs(30);
/// How often a running delivery renews its lease: three times within its life.
pub const LEASE_RENEWAL: Duration = Duration::from_secs(LEASE_TTL.as_secs() / 3);

/// The outcome of asking for a run's lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lease {
    Granted,
    /// Another executor holds it for this much longer.
    HeldFor(Duration),
}

/// The runs' leases. Owners are unique per delivery, so a held lease is always another's.
#[async_trait]
pub trait Leases: Send + Sync {
    /// Take the run's lease for `owner`, or say how long another holder keeps it.
    async fn acquire(&self, run_id: &str, owner: &str) -> Result<Lease, FleetError>;
    /// Extend the lease while `owner` still holds it, or take it again when nobody does (Redis
    /// forgot it: a restart, a failover) so that nobody else starts the run meanwhile; false
    /// when another holds it.
    async fn renew(&self, run_id: &str, owner: &str) -> Result<bool, FleetError>;
    /// Drop the lease if `owner` holds it.
    async fn release(&self, run_id: &str, owner: &str) -> Result<(), FleetError>;
    /// Claim the fleet's turn at `name` for `period`: true for exactly one caller until the
    /// period lapses. A periodic chore that one replica does for all (reconciling, reading a
    /// quota endpoint) runs only on a true.
    async fn take_turn(&self, name: &str, period: Duration) -> Result<bool, FleetError>;
    /// Claim the fleet's turn at a chore due once every `period`, the first time one period
    /// after the fleet first asked: true for exactly one caller as each period ends. A chore
    /// that spends something (a canary's call) so costs nothing when a fleet starts or a replica
    /// joins. A fleet that stops asking for a whole period starts over.
    async fn take_period(&self, name: &str, period: Duration) -> Result<bool, FleetError>;
    /// Mark the run cancelled by `by` for every executor: whoever runs it stops before its next
    /// call. The mark lasts [`CANCEL_TTL`], past any run's deadline.
    async fn cancel(&self, run_id: &str, by: &str) -> Result<(), FleetError>;
    /// Who cancelled the run, if someone did.
    async fn cancelled_by(&self, run_id: &str) -> Result<Option<String>, FleetError>;
}

/// How long a run's cancellation is remembered: longer than any run may last.
pub const CANCEL_TTL: Duration = Duration::from_secs(2 * 24 * 3600);

/// Leases as Redis keys with a TTL.
#[derive(Clone)]
pub struct RedisLeases {
    conn: RedisConnection,
    ns: String,
}

impl RedisLeases {
    pub fn new(conn: RedisConnection, ns: impl Into<String>) -> Self {
        Self {
            conn,
            ns: ns.into(),
        }
    }

    /// The Redis key of the run's lease.
    pub fn key(&self, run_id: &str) -> String {
        format!("{}:run:{run_id}:lease", self.ns)
    }

    /// The Redis key of the turn at `name`.
    pub fn turn_key(&self, name: &str) -> String {
        format!("{}:turn:{name}", self.ns)
    }

    /// The Redis key marking the run cancelled.
    pub fn cancel_key(&self, run_id: &str) -> String {
        format!("{}:run:{run_id}:cancelled", self.ns)
    }

    /// The Redis key holding when the period of chore `name` ends (ms, Redis time).
    pub fn period_key(&self, name: &str) -> String {
        format!("{}:period:{name}", self.ns)
    }
}

#[async_trait]
impl Leases for RedisLeases {
    async fn acquire(&self, run_id: &str, owner: &str) -> Result<Lease, FleetError> {
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

    async fn renew(&self, run_id: &str, owner: &str) -> Result<bool, FleetError> {
        let mut conn = self.conn.clone();
        let renewed: i64 = RENEW
            .key(self.key(run_id))
            .arg(owner)
            .arg(LEASE_TTL.as_millis() as u64)
            .invoke_async(&mut conn)
            .await?;
        Ok(renewed == 1)
    }

    async fn release(&self, run_id: &str, owner: &str) -> Result<(), FleetError> {
        let mut conn = self.conn.clone();
        let _: i64 = RELEASE
            .key(self.key(run_id))
            .arg(owner)
            .invoke_async(&mut conn)
            .await?;
        Ok(())
    }

    async fn take_turn(&self, name: &str, period: Duration) -> Result<bool, FleetError> {
        let mut conn = self.conn.clone();
        let taken: Option<String> = redis::cmd("SET")
            .arg(self.turn_key(name))
            .arg(std::process::id())
            .arg("NX")
            .arg("PX")
            .arg(period.as_millis().max(1) as u64)
            .query_async(&mut conn)
            .await?;
        Ok(taken.is_some())
    }

    async fn take_period(&self, name: &str, period: Duration) -> Result<bool, FleetError> {
        let mut conn = self.conn.clone();
        let taken: i64 = TAKE_PERIOD
            .key(self.period_key(name))
            .arg(period.as_millis().max(1) as u64)
            .invoke_async(&mut conn)
            .await?;
        Ok(taken == 1)
    }

    async fn cancel(&self, run_id: &str, by: &str) -> Result<(), FleetError> {
        let mut conn = self.conn.clone();
        let _: () = redis::cmd("SET")
            .arg(self.cancel_key(run_id))
            .arg(by)
            .arg("PX")
            .arg(CANCEL_TTL.as_millis() as u64)
            .query_async(&mut conn)
            .await?;
        Ok(())
    }

    async fn cancelled_by(&self, run_id: &str) -> Result<Option<String>, FleetError> {
        let mut conn = self.conn.clone();
        let by: Option<String> = redis::cmd("GET")
            .arg(self.cancel_key(run_id))
            .query_async(&mut conn)
            .await?;
        Ok(by)
    }
}

/// Leases in one process, timed by a [`Clock`]: run id → (owner, expiry in clock ms).
pub struct MemoryLeases {
    clock: Arc<dyn Clock>,
    held: Mutex<HashMap<String, (String, u64)>>,
    /// Chore name → when its period ends (clock ms).
    periods: Mutex<HashMap<String, u64>>,
    /// Run id → who cancelled it.
    cancelled: Mutex<HashMap<String, String>>,
}

impl Default for MemoryLeases {
    fn default() -> Self {
        MemoryLeases::new(Arc::new(SystemClock))
    }
}

impl MemoryLeases {
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        MemoryLeases {
            clock,
            held: Mutex::new(HashMap::new()),
            periods: Mutex::new(HashMap::new()),
            cancelled: Mutex::new(Default::default()),
        }
    }

    /// Run the closure on the leases still in force.
    fn with_held<T>(&self, f: impl FnOnce(&mut HashMap<String, (String, u64)>, u64) -> T) -> T {
        let now = self.clock.now_ms();
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        held.retain(|_, (_, until)| *until > now);
        f(&mut held, now)
    }
}

#[async_trait]
impl Leases for MemoryLeases {
    async fn acquire(&self, run_id: &str, owner: &str) -> Result<Lease, FleetError> {
        Ok(self.with_held(|held, now| match held.get(run_id) {
            Some((_, until)) => Lease::HeldFor(Duration::from_millis(until - now)),
            None => {
                let until = now + LEASE_TTL.as_millis() as u64;
                held.insert(run_id.to_string(), (owner.to_string(), until));
                Lease::Granted
            }
        }))
    }

    async fn renew(&self, run_id: &str, owner: &str) -> Result<bool, FleetError> {
        Ok(self.with_held(|held, now| match held.get(run_id) {
            Some((holder, until)) if holder != owner && *until > now => false,
            _ => {
                let until = now + LEASE_TTL.as_millis() as u64;
                held.insert(run_id.to_string(), (owner.to_string(), until));
                true
            }
        }))
    }

    async fn release(&self, run_id: &str, owner: &str) -> Result<(), FleetError> {
        self.with_held(|held, _| {
            if held.get(run_id).is_some_and(|(holder, _)| holder == owner) {
                held.remove(run_id);
            }
        });
        Ok(())
    }

    async fn take_turn(&self, name: &str, period: Duration) -> Result<bool, FleetError> {
        // Turns live beside the leases under a key no run id can take (run ids have no spaces).
        let key = format!("turn {name}");
        Ok(self.with_held(|held, now| {
            if held.contains_key(&key) {
                return false;
            }
            held.insert(key, (String::new(), now + period.as_millis() as u64));
            true
        }))
    }

    async fn take_period(&self, name: &str, period: Duration) -> Result<bool, FleetError> {
        let (now, period) = (self.clock.now_ms(), period.as_millis().max(1) as u64);
        let mut periods = self.periods.lock().unwrap_or_else(|e| e.into_inner());
        let ends = periods.get(name).copied();
        // As in Redis, a period's end is kept one more period, and forgotten after that.
        let taken = match ends {
            Some(end) if now < end => return Ok(false),
            Some(end) => now < end + period,
            None => false,
        };
        periods.insert(name.to_string(), now + period);
        Ok(taken)
    }

    async fn cancel(&self, run_id: &str, by: &str) -> Result<(), FleetError> {
        let mut cancelled = self.cancelled.lock().unwrap_or_else(|e| e.into_inner());
        cancelled.insert(run_id.to_string(), by.to_string());
        Ok(())
    }

    async fn cancelled_by(&self, run_id: &str) -> Result<Option<String>, FleetError> {
        let cancelled = self.cancelled.lock().unwrap_or_else(|e| e.into_inner());
        Ok(cancelled.get(run_id).cloned())
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

/// 1 for the caller that finds the period of KEYS[1] ended, which starts the next; 0 for the
/// others, and for the first ask, which starts the first period. An end is kept one period more.
static TAKE_PERIOD: LazyLock<redis::Script> = LazyLock::new(|| {
    redis::Script::new(
        r"
        local t = redis.call('TIME')
        local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
        local period = tonumber(ARGV[1])
        local ends = tonumber(redis.call('GET', KEYS[1]))
        if ends and now < ends then return 0 end
        redis.call('SET', KEYS[1], now + period, 'PX', 2 * period)
        if ends then return 1 end
        return 0
        ",
    )
});

static RENEW: LazyLock<redis::Script> = LazyLock::new(|| {
    redis::Script::new(
        r"
        local holder = redis.call('GET', KEYS[1])
        if holder == ARGV[1] then
            redis.call('PEXPIRE', KEYS[1], ARGV[2])
            return 1
        end
        if not holder then
            redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
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
