//! The fleet's spend ledger in Redis: [`RedisLedger`].
//!
//! A cap must hold for every replica at once, so each reservation is one Lua script that sweeps
//! lapsed holds, checks both caps and holds the estimate, on Redis `TIME`: concurrent replicas
//! are serialised by Redis and never pass a cap together.
//!
//! # Key layout
//!
//! `ns` is the namespace (`FREEWAY_NAMESPACE`). The tenant in braces is the Redis Cluster hash
//! tag: every key of a tenant is in one slot, so one script may touch its day and its run
//! together, and a call touches that tenant's keys only, whatever the number of tenants.
//!
//! | key | type | what |
//! |---|---|---|
//! | `ns:spend:{tenant}:day:<day_end_ms>` | hash | the tenant's day: `spent`, `reserved` (nano-USD), `h:<id>` per reservation |
//! | `ns:spend:{tenant}:day:<day_end_ms>:holds` | ZSET | the day's live reservations, scored by when they lapse |
//! | `ns:spend:{tenant}:run:<run_id>` | hash | one run, as a day |
//! | `ns:spend:{tenant}:run:<run_id>:holds` | ZSET | the run's live reservations |
//!
//! A day's keys expire [`DAY_KEPT_MS`] after the day ends, a run's [`RUN_KEPT_MS`] after its
//! last write. Tenant and run ids are [`LedgerId`]s: no braces, so the tag is always the tenant.

use super::{
    Cap, Caps, DAY_AHEAD_MAX_MS, DAY_KEPT_MS, HOLD_MS, Ledger, LedgerId, RUN_KEPT_MS, Reservation,
    Reserve, SWEEP_MAX, TenantSpend, Usd,
};
use crate::connect::RedisConnection;
use crate::error::FleetError;
use async_trait::async_trait;
use redis::{ErrorKind, RedisError, Script};
use std::sync::LazyLock;

static RESERVE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("spend.lua"),
        include_str!("reserve.lua")
    ))
});
static SETTLE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("spend.lua"),
        include_str!("settle.lua")
    ))
});
static USAGE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("spend.lua"),
        include_str!("usage.lua")
    ))
});

/// The fleet's spend, in one Redis namespace.
#[derive(Clone)]
pub struct RedisLedger {
    conn: RedisConnection,
    ns: String,
    hold_ms: u64,
}

impl RedisLedger {
    pub fn new(conn: RedisConnection, ns: impl Into<String>) -> Self {
        RedisLedger {
            conn,
            ns: ns.into(),
            hold_ms: HOLD_MS,
        }
    }

    /// Reservations lapse `hold_ms` after they were granted instead of [`HOLD_MS`].
    pub fn with_hold_ms(mut self, hold_ms: u64) -> Self {
        self.hold_ms = hold_ms;
        self
    }

    /// The hash of `tenant`'s spend on the day ending at `day_end_ms`.
    pub fn day_key(&self, tenant: &LedgerId, day_end_ms: u64) -> String {
        format!("{}:spend:{{{}}}:day:{day_end_ms}", self.ns, tenant.as_str())
    }

    /// The hash of one run's spend.
    pub fn run_key(&self, tenant: &LedgerId, run_id: &LedgerId) -> String {
        format!(
            "{}:spend:{{{}}}:run:{}",
            self.ns,
            tenant.as_str(),
            run_id.as_str()
        )
    }

    /// The four keys a reservation touches, in the scripts' order: its day's hash and holds,
    /// its run's hash and holds.
    fn keys(&self, tenant: &LedgerId, run_id: &LedgerId, day_end_ms: u64) -> [String; 4] {
        let day = self.day_key(tenant, day_end_ms);
        let run = self.run_key(tenant, run_id);
        let (day_holds, run_holds) = (holds_key(&day), holds_key(&run));
        [day, day_holds, run, run_holds]
    }
}

fn holds_key(account: &str) -> String {
    format!("{account}:holds")
}

/// A cap as the scripts take it: -1 for none.
fn cap_arg(cap: Option<Usd>) -> i64 {
    cap.map_or(-1, |c| c.nanos() as i64)
}

fn unexpected(what: &'static str) -> FleetError {
    FleetError::from(RedisError::from((ErrorKind::UnexpectedReturnType, what)))
}

#[async_trait]
impl Ledger for RedisLedger {
    async fn reserve(
        &self,
        tenant: &LedgerId,
        run_id: &LedgerId,
        day_end_ms: u64,
        estimate: Usd,
        caps: Caps,
    ) -> Result<Reserve, FleetError> {
        let reservation = Reservation::new(tenant, run_id, day_end_ms, estimate);
        let [day, day_holds, run, run_holds] = self.keys(tenant, run_id, day_end_ms);
        let mut conn = self.conn.clone();
        let reply: Vec<i64> = RESERVE
            .key(&day)
            .key(&day_holds)
            .key(&run)
            .key(&run_holds)
            .arg(&reservation.id)
            .arg(estimate.nanos())
            .arg(cap_arg(caps.tenant))
            .arg(cap_arg(caps.run))
            .arg(self.hold_ms)
            .arg(day_end_ms)
            .arg(DAY_AHEAD_MAX_MS)
            .arg(DAY_KEPT_MS)
            .arg(RUN_KEPT_MS)
            .arg(SWEEP_MAX)
            .invoke_async(&mut conn)
            .await?;
        match reply.as_slice() {
            [1, _] => Ok(Reserve::Granted(reservation)),
            [0, 1] => Ok(Reserve::Refused { which: Cap::Tenant }),
            [0, 2] => Ok(Reserve::Refused { which: Cap::Run }),
            _ => Err(unexpected("a reservation's verdict")),
        }
    }

    async fn settle(&self, reservation: &Reservation, actual: Usd) -> Result<(), FleetError> {
        let [day, day_holds, run, run_holds] = self.keys(
            &reservation.tenant,
            &reservation.run_id,
            reservation.day_end_ms,
        );
        let mut conn = self.conn.clone();
        let _: i64 = SETTLE
            .key(&day)
            .key(&day_holds)
            .key(&run)
            .key(&run_holds)
            .arg(&reservation.id)
            .arg(actual.nanos())
            .arg(reservation.day_end_ms)
            .arg(DAY_AHEAD_MAX_MS)
            .arg(DAY_KEPT_MS)
            .arg(RUN_KEPT_MS)
            .invoke_async(&mut conn)
            .await?;
        Ok(())
    }

    async fn usage(&self, tenant: &LedgerId, day_end_ms: u64) -> Result<TenantSpend, FleetError> {
        let day = self.day_key(tenant, day_end_ms);
        let mut conn = self.conn.clone();
        let reply: Vec<i64> = USAGE
            .key(&day)
            .key(holds_key(&day))
            .arg(SWEEP_MAX)
            .invoke_async(&mut conn)
            .await?;
        match reply.as_slice() {
            [spent, reserved] => Ok(TenantSpend {
                spent: Usd((*spent).max(0) as u64),
                reserved: Usd((*reserved).max(0) as u64),
            }),
            _ => Err(unexpected("a day's spent and reserved")),
        }
    }
}
