//! What tenants spend and call, read from the attempt log, for `GET /v1/tenants` and
//! `GET /v1/tenants/{id}/usage` (docs/design.md §4.8) and the board's spend by tenant.
//!
//! The ledger in Redis ([`crate::spend`]) holds today's spend fleet-wide, for the caps; the
//! store is the record: every attempt's `cost_usd` under its run, whose tenant it counts for.
//! Days are the caller's (a tier's `day_reset` zone makes them 23 to 25 hours long), passed as
//! their bounds, so both backends group by plain comparisons of epoch ms.

use super::StoreError;

/// The most tenants one [`super::Store::usage_by_day`] reads.
pub const MAX_USAGE_TENANTS: usize = 200;
/// The most days one [`super::Store::usage_by_day`] reads.
pub const MAX_USAGE_DAYS: usize = 366;

/// One tenant's calls on one route on one day, from the attempt log.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct RouteDay {
    pub tenant: String,
    /// When the day began: one of the bounds the read was given.
    pub day_start_ms: u64,
    /// The attempt's route (`CONNECTION:PROVIDER/MODEL`).
    pub route: String,
    /// Attempts made (each a provider call, failed or not).
    pub calls: u64,
    /// What they cost, in USD.
    pub cost_usd: f64,
}

/// A tenant whose runs were created lately.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct TenantSeen {
    pub tenant: String,
    /// The tier of its newest run (tiers are the runs', not the tenants').
    pub tier: String,
    /// Its runs created since the time asked about.
    pub runs: u64,
    /// When its newest run was created (epoch ms).
    pub last_run_ms: u64,
}

/// Check the arguments of a usage read: at most [`MAX_USAGE_TENANTS`] tenants, and day bounds
/// strictly ascending, at most [`MAX_USAGE_DAYS`] days. `false`: there is nothing to read.
pub(crate) fn check_usage_args(tenants: &[String], bounds: &[u64]) -> Result<bool, StoreError> {
    if tenants.len() > MAX_USAGE_TENANTS {
        return Err(StoreError::Invalid(format!(
            "at most {MAX_USAGE_TENANTS} tenants at a time"
        )));
    }
    if bounds.len() > MAX_USAGE_DAYS + 1 {
        return Err(StoreError::Invalid(format!(
            "at most {MAX_USAGE_DAYS} days at a time"
        )));
    }
    if bounds.windows(2).any(|w| w[0] >= w[1]) {
        return Err(StoreError::Invalid(
            "day bounds must be strictly ascending".into(),
        ));
    }
    if bounds.iter().any(|&b| i64::try_from(b).is_err()) {
        return Err(StoreError::Invalid(
            "a day bound does not fit a signed 64-bit column".into(),
        ));
    }
    Ok(!tenants.is_empty() && bounds.len() >= 2)
}

/// The start of the day among `bounds` that holds `t_ms`, if any.
pub(crate) fn day_of(bounds: &[u64], t_ms: u64) -> Option<u64> {
    let (first, last) = (*bounds.first()?, *bounds.last()?);
    if t_ms < first || t_ms >= last {
        return None;
    }
    // The last bound at or before t_ms.
    let i = bounds.partition_point(|&b| b <= t_ms);
    Some(bounds[i - 1])
}

/// The order every backend answers in: by tenant, day, then route (bytewise, whatever a
/// database's collation says).
pub(crate) fn sort_usage(rows: &mut [RouteDay]) {
    rows.sort_by(|a, b| {
        (a.tenant.as_bytes(), a.day_start_ms, a.route.as_bytes()).cmp(&(
            b.tenant.as_bytes(),
            b.day_start_ms,
            b.route.as_bytes(),
        ))
    });
}

/// The order of [`super::Store::recent_tenants`]: newest run first, then by tenant.
pub(crate) fn sort_tenants(seen: &mut [TenantSeen]) {
    seen.sort_by(|a, b| {
        b.last_run_ms
            .cmp(&a.last_run_ms)
            .then_with(|| a.tenant.as_bytes().cmp(b.tenant.as_bytes()))
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_moment_falls_in_the_day_whose_bounds_hold_it() {
        let bounds = [100, 200, 300];
        assert_eq!(day_of(&bounds, 99), None);
        assert_eq!(day_of(&bounds, 100), Some(100));
        assert_eq!(day_of(&bounds, 199), Some(100));
        assert_eq!(day_of(&bounds, 200), Some(200));
        assert_eq!(day_of(&bounds, 299), Some(200));
        assert_eq!(day_of(&bounds, 300), None);
        assert_eq!(day_of(&[], 1), None);
    }

    #[test]
    fn usage_reads_take_ascending_bounds_and_a_bounded_number_of_tenants() {
        let one = vec!["t".to_string()];
        assert_eq!(check_usage_args(&one, &[1, 2]).ok(), Some(true));
        assert_eq!(check_usage_args(&[], &[1, 2]).ok(), Some(false));
        assert_eq!(check_usage_args(&one, &[1]).ok(), Some(false));
        for bad in [&[2, 1][..], &[1, 1], &[1, u64::MAX]] {
            assert!(check_usage_args(&one, bad).is_err(), "{bad:?}");
        }
        let many = vec!["t".to_string(); MAX_USAGE_TENANTS + 1];
        assert!(check_usage_args(&many, &[1, 2]).is_err());
        let days: Vec<u64> = (0..=MAX_USAGE_DAYS as u64 + 1).collect();
        assert!(check_usage_args(&one, &days).is_err());
    }
}
