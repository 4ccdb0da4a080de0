//! The ledger in one process: [`MemoryLedger`], the rules of the Lua scripts on a [`Clock`].
//!
//! Engine tests and benchmarks exercise the spend rules, not Redis; with this they need no
//! server. Every tenant's day and every run is an *account* as in Redis: spent, reserved, and
//! each reservation's hold (live, lapsed or settled), kept for as long as its key would be.

use super::{
    Cap, Caps, HOLD_MS, Ledger, LedgerId, RUN_KEPT_MS, Reservation, Reserve, SWEEP_MAX,
    TenantSpend, Usd, day_kept_ms,
};
use crate::clock::{Clock, SystemClock};
use crate::error::FleetError;
use async_trait::async_trait;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

/// Spend held in a mutex, timed by a [`Clock`].
pub struct MemoryLedger {
    clock: Arc<dyn Clock>,
    hold_ms: u64,
    tenants: Mutex<HashMap<LedgerId, Tenant>>,
}

#[derive(Default)]
struct Tenant {
    /// Day end (epoch ms) → the tenant's spend that day.
    days: HashMap<u64, Account>,
    runs: HashMap<LedgerId, Account>,
}

/// What a Redis hash and its sorted set of holds keep.
#[derive(Default)]
struct Account {
    spent: u64,
    reserved: u64,
    holds: HashMap<String, Hold>,
    /// When the account is forgotten, as its keys expire (clock ms).
    kept_until: u64,
}

enum Hold {
    Live { amount: u64, until: u64 },
    Lapsed,
    Settled,
}

impl Account {
    fn total(&self) -> u64 {
        self.spent + self.reserved
    }

    /// Release the live holds whose time ran out, the oldest first, at most [`SWEEP_MAX`].
    fn sweep(&mut self, now: u64) {
        let mut due: Vec<(u64, String)> = self
            .holds
            .iter()
            .filter_map(|(id, hold)| match hold {
                Hold::Live { until, .. } if *until <= now => Some((*until, id.clone())),
                _ => None,
            })
            .collect();
        due.sort();
        for (_, id) in due.into_iter().take(SWEEP_MAX) {
            if let Some(hold) = self.holds.get_mut(&id)
                && let Hold::Live { amount, .. } = *hold
            {
                self.reserved = self.reserved.saturating_sub(amount);
                *hold = Hold::Lapsed;
            }
        }
    }

    fn hold(&mut self, id: &str, amount: u64, until: u64, kept_until: u64) {
        self.reserved += amount;
        self.holds
            .insert(id.to_string(), Hold::Live { amount, until });
        self.kept_until = kept_until;
    }

    fn settle(&mut self, id: &str, actual: u64, kept_until: u64) {
        match self.holds.insert(id.to_string(), Hold::Settled) {
            Some(Hold::Settled) => return,
            Some(Hold::Live { amount, .. }) => {
                self.reserved = self.reserved.saturating_sub(amount);
            }
            Some(Hold::Lapsed) | None => {}
        }
        self.spent += actual;
        self.kept_until = kept_until;
    }
}

impl Tenant {
    /// Forget the accounts whose keys would have expired.
    fn prune(&mut self, now: u64) {
        self.days.retain(|_, a| a.kept_until > now);
        self.runs.retain(|_, a| a.kept_until > now);
    }
}

impl Default for MemoryLedger {
    fn default() -> Self {
        MemoryLedger::new(Arc::new(SystemClock))
    }
}

impl MemoryLedger {
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        MemoryLedger {
            clock,
            hold_ms: HOLD_MS,
            tenants: Mutex::new(HashMap::new()),
        }
    }

    /// Reservations lapse `hold_ms` after they were granted instead of [`HOLD_MS`].
    pub fn with_hold_ms(mut self, hold_ms: u64) -> Self {
        self.hold_ms = hold_ms;
        self
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<LedgerId, Tenant>> {
        // A panic while holding the lock leaves plain counters behind: still consistent.
        self.tenants.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[async_trait]
impl Ledger for MemoryLedger {
    async fn reserve(
        &self,
        tenant: &LedgerId,
        run_id: &LedgerId,
        day_end_ms: u64,
        estimate: Usd,
        caps: Caps,
    ) -> Result<Reserve, FleetError> {
        let mut tenants = self.lock();
        let now = self.clock.now_ms();
        let t = tenants.entry(tenant.clone()).or_default();
        t.prune(now);
        let day = t.days.entry(day_end_ms).or_default();
        let run = t.runs.entry(run_id.clone()).or_default();
        day.sweep(now);
        run.sweep(now);
        let est = estimate.nanos();
        if caps.run.is_some_and(|cap| run.total() + est > cap.nanos()) {
            return Ok(Reserve::Refused { which: Cap::Run });
        }
        if caps
            .tenant
            .is_some_and(|cap| day.total() + est > cap.nanos())
        {
            return Ok(Reserve::Refused { which: Cap::Tenant });
        }
        let reservation = Reservation::new(tenant, run_id, day_end_ms, estimate);
        let until = now + self.hold_ms;
        day.hold(
            &reservation.id,
            est,
            until,
            now + day_kept_ms(day_end_ms, now),
        );
        run.hold(&reservation.id, est, until, now + RUN_KEPT_MS);
        Ok(Reserve::Granted(reservation))
    }

    async fn settle(&self, reservation: &Reservation, actual: Usd) -> Result<(), FleetError> {
        let mut tenants = self.lock();
        let now = self.clock.now_ms();
        let t = tenants.entry(reservation.tenant.clone()).or_default();
        t.prune(now);
        let kept = now + day_kept_ms(reservation.day_end_ms, now);
        t.days.entry(reservation.day_end_ms).or_default().settle(
            &reservation.id,
            actual.nanos(),
            kept,
        );
        t.runs
            .entry(reservation.run_id.clone())
            .or_default()
            .settle(&reservation.id, actual.nanos(), now + RUN_KEPT_MS);
        Ok(())
    }

    async fn usage(&self, tenant: &LedgerId, day_end_ms: u64) -> Result<TenantSpend, FleetError> {
        let mut tenants = self.lock();
        let now = self.clock.now_ms();
        let Some(t) = tenants.get_mut(tenant) else {
            return Ok(TenantSpend::default());
        };
        t.prune(now);
        let Some(day) = t.days.get_mut(&day_end_ms) else {
            return Ok(TenantSpend::default());
        };
        day.sweep(now);
        Ok(TenantSpend {
            spent: Usd(day.spent),
            reserved: Usd(day.reserved),
        })
    }
}
