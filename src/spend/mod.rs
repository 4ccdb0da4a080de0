//! Spend caps: what tenants and runs spend on priced routes, fleet-wide.
//!
//! Paid fallbacks cost money, and a tier caps what each of its tenants spends a day
//! (`spend_usd_per_day`) while a run may cap itself (`max_usd`). A cap that each replica checked
//! against what it alone had seen would let a fleet of N replicas spend N caps; one that counted
//! only answered calls would let every call in flight pass at once. So before a priced attempt
//! the worker *reserves* its estimate in one ledger every replica shares, atomically against
//! both caps, and the attempt is made only when the reservation is granted; the answer's real
//! cost then replaces the estimate ([`Ledger::settle`]). A grant never takes spent + reserved
//! past a cap, so the fleet spends at most the cap plus what answers cost beyond their estimates
//! (one call's overrun when calls are made one after another).
//!
//! A reservation whose worker died is never settled: each one lapses [`HOLD_MS`] after it was
//! granted and its estimate stops counting. If that worker's call did reach the provider, its
//! cost is not counted (the ledger cannot know it); a settle that comes late still counts.
//!
//! Amounts are whole nano-dollars ([`Usd`]), so sums never drift the way floats do and a cheap
//! call (a few tokens at cents per million) still counts. [`RedisLedger`] is the fleet's: Lua
//! scripts on Redis `TIME`, every key of a tenant under its hash tag, and the work of a call in
//! proportion to that tenant's keys alone. [`MemoryLedger`] keeps the same rules in one process;
//! `tests/fleet/spend.rs` runs one suite on both.

mod memory;
mod redis;

pub use self::redis::RedisLedger;
pub use memory::MemoryLedger;

use crate::error::FleetError;
use async_trait::async_trait;

/// How long a reservation holds its estimate without being settled: longer than any call takes
/// (a call's whole-answer timeout is minutes), short enough that a dead worker's estimate does
/// not keep a tenant out for long.
pub const HOLD_MS: u64 = 10 * 60 * 1000;

/// How long a run's spend is kept after its last reservation or settle: runs (batch ones with
/// their deadlines included) end within a day.
pub const RUN_KEPT_MS: u64 = 48 * 3600 * 1000;

/// How long a day's spend is kept after the day ended: a settle that comes late still finds
/// its day, and yesterday can still be read.
pub const DAY_KEPT_MS: u64 = 48 * 3600 * 1000;

/// A day end further ahead than this is taken as this far: a day is at most a little over 24 h
/// long on any clock, so a later end is a caller's mistake, which must not keep keys for ever.
const DAY_AHEAD_MAX_MS: u64 = 7 * 24 * 3600 * 1000;

/// The most lapsed reservations one call releases: a call's work stays bounded even after many
/// workers died at once; the rest are released by the calls that follow (until then they keep
/// counting, which errs on the side of the cap).
const SWEEP_MAX: usize = 100;

/// Nano-dollars in a dollar.
const NANOS_PER_USD: f64 = 1e9;

/// The largest amount the ledger takes: USD 1,000,000 in nano-dollars, so that sums of many
/// amounts stay exact in the doubles Lua counts with (below 2^53).
const MAX_NANOS: u64 = 1_000_000_000_000_000;

/// An amount of US dollars, in whole nano-dollars. The ledger takes amounts up to
/// USD 1,000,000 ([`Usd::MAX`]); what it sums up and reports may be more.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Usd(u64);

/// An amount that is not a number of USD the ledger takes (negative, not finite, too large).
#[derive(Debug, Clone, Copy, PartialEq, thiserror::Error)]
#[error("{0} is not an amount of USD between 0 and 1000000")]
pub struct BadAmount(pub f64);

impl Usd {
    pub const ZERO: Usd = Usd(0);
    pub const MAX: Usd = Usd(MAX_NANOS);

    /// `usd` in nano-dollars, rounded up (a cost is never counted short), except that a value
    /// within a millionth of a nano-dollar of a whole one is that one: `0.1 + 0.2` is not made
    /// a nano-dollar dearer by the float's last bit.
    pub fn from_usd(usd: f64) -> Result<Usd, BadAmount> {
        if !(usd.is_finite() && usd >= 0.0) {
            return Err(BadAmount(usd));
        }
        let nanos = usd * NANOS_PER_USD;
        let nearest = nanos.round();
        let whole = if (nanos - nearest).abs() < 1e-6 {
            nearest
        } else {
            nanos.ceil()
        };
        if whole > MAX_NANOS as f64 {
            return Err(BadAmount(usd));
        }
        Ok(Usd(whole as u64))
    }

    pub fn from_nanos(nanos: u64) -> Result<Usd, BadAmount> {
        if nanos > MAX_NANOS {
            return Err(BadAmount(nanos as f64 / NANOS_PER_USD));
        }
        Ok(Usd(nanos))
    }

    pub fn nanos(self) -> u64 {
        self.0
    }

    /// The amount in USD, for the API and metrics.
    pub fn usd(self) -> f64 {
        self.0 as f64 / NANOS_PER_USD
    }
}

/// A tenant's or a run's id as the ledger keys it: 1-128 characters of `[A-Za-z0-9_.:-]`, the
/// ids the API takes, which keeps the Redis hash tags whole (no braces).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LedgerId(String);

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("a tenant or run id must be 1-128 characters of [A-Za-z0-9_.:-]")]
pub struct BadId;

impl LedgerId {
    pub fn new(id: &str) -> Result<LedgerId, BadId> {
        if crate::job::is_id(id) {
            Ok(LedgerId(id.to_string()))
        } else {
            Err(BadId)
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The caps a reservation must stay within; `None`: that cap does not apply.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Caps {
    /// The tenant's spend on its tier's day (`spend_usd_per_day`).
    pub tenant: Option<Usd>,
    /// The run's spend (`max_usd`).
    pub run: Option<Usd>,
}

/// Which cap refused a reservation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cap {
    /// The tenant's day is spent: priced routes open again with the next day.
    Tenant,
    /// The run's own cap is spent: priced routes stay closed for this run.
    Run,
}

/// The answer to a reservation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reserve {
    /// The estimate is held: make the attempt, then settle it.
    Granted(Reservation),
    /// The estimate would take spent + reserved past a cap: the attempt is not made. When both
    /// caps would be passed, the run's is named, as the one that no new day lifts.
    Refused { which: Cap },
}

/// An estimate held for one priced attempt, until [`Ledger::settle`] replaces it with what the
/// attempt cost (or it lapses after [`HOLD_MS`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reservation {
    tenant: LedgerId,
    run_id: LedgerId,
    day_end_ms: u64,
    id: String,
    estimate: Usd,
}

impl Reservation {
    fn new(tenant: &LedgerId, run_id: &LedgerId, day_end_ms: u64, estimate: Usd) -> Reservation {
        Reservation {
            tenant: tenant.clone(),
            run_id: run_id.clone(),
            day_end_ms,
            id: ulid::Ulid::generate().to_string().to_lowercase(),
            estimate,
        }
    }

    /// Unique among every reservation ever granted.
    pub fn id(&self) -> &str {
        &self.id
    }

    pub fn estimate(&self) -> Usd {
        self.estimate
    }
}

/// What a tenant spent on one day, and what reservations hold on it now.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TenantSpend {
    pub spent: Usd,
    pub reserved: Usd,
}

/// The fleet's spend ledger. `day_end_ms` is the epoch ms at which the tenant's day ends (the
/// next midnight of its tier's `day_reset` zone, computed by the caller): each day counts from
/// zero.
#[async_trait]
pub trait Ledger: Send + Sync {
    /// Hold `estimate` for a priced attempt of `run_id` by `tenant` on the day ending at
    /// `day_end_ms`, if the tenant's day and the run, spent and reserved, stay within `caps`
    /// with it. Atomic fleet-wide: concurrent reservations never pass a cap together.
    async fn reserve(
        &self,
        tenant: &LedgerId,
        run_id: &LedgerId,
        day_end_ms: u64,
        estimate: Usd,
        caps: Caps,
    ) -> Result<Reserve, FleetError>;

    /// The attempt is over: `actual` (0 when it failed without a cost) replaces its estimate in
    /// the tenant's day and the run. A reservation that lapsed still adds `actual`: the money
    /// was spent. Settling the same reservation again changes nothing.
    async fn settle(&self, reservation: &Reservation, actual: Usd) -> Result<(), FleetError>;

    /// What `tenant` spent on the day ending at `day_end_ms`, and holds reserved on it.
    async fn usage(&self, tenant: &LedgerId, day_end_ms: u64) -> Result<TenantSpend, FleetError>;
}

/// How long a day's account is kept after a write at `now_ms`: until [`DAY_KEPT_MS`] after the
/// day ends (`spend.lua` computes the same on Redis time).
fn day_kept_ms(day_end_ms: u64, now_ms: u64) -> u64 {
    day_end_ms.saturating_sub(now_ms).min(DAY_AHEAD_MAX_MS) + DAY_KEPT_MS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amounts_are_whole_nano_dollars_rounded_up() {
        assert_eq!(Usd::from_usd(0.01).map(Usd::nanos), Ok(10_000_000));
        assert_eq!(Usd::from_usd(0.1 + 0.2).map(Usd::nanos), Ok(300_000_000));
        assert_eq!(Usd::from_usd(1.5e-9).map(Usd::nanos), Ok(2));
        assert_eq!(Usd::from_usd(6e-7).map(Usd::nanos), Ok(600));
        assert_eq!(Usd::from_usd(0.0), Ok(Usd::ZERO));
        assert_eq!(Usd::from_usd(1e6), Ok(Usd::MAX));
        for bad in [-1e-9, f64::NAN, f64::INFINITY, 1e6 + 1.0] {
            assert!(Usd::from_usd(bad).is_err(), "{bad}");
        }
        assert!(Usd::from_nanos(MAX_NANOS + 1).is_err());
        assert_eq!(Usd::from_nanos(5).map(Usd::usd), Ok(5e-9));
    }

    #[test]
    fn ids_are_api_ids() {
        assert!(LedgerId::new("acme.org:team-1_x").is_ok());
        for bad in ["", "a{b}", "a b", &"x".repeat(129)] {
            assert_eq!(LedgerId::new(bad), Err(BadId), "{bad}");
        }
    }

    #[test]
    fn a_day_is_kept_past_its_end_and_a_wrong_end_is_clamped() {
        assert_eq!(day_kept_ms(10_000, 4_000), 6_000 + DAY_KEPT_MS);
        assert_eq!(day_kept_ms(1_000, 4_000), DAY_KEPT_MS);
        assert_eq!(day_kept_ms(u64::MAX, 0), DAY_AHEAD_MAX_MS + DAY_KEPT_MS);
    }
}
