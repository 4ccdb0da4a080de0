//! The SQL of usage reads ([`crate::store::usage`]), the same text on both backends: each value
//! a bound parameter, days told apart by comparisons with their bounds (no date functions, which
//! differ between SQLite and PostgreSQL and know nothing of a tier's zone).

use super::list::{Bind, Statement};

/// Calls and cost by tenant, day and route. Parameters: the bounds (`$1`…`$n`), then the
/// tenants. Each attempt's day is the bound that starts it, picked by a `CASE` over the bounds;
/// the attempt log is read by its time index, each row joined to its run by the run's key.
pub(super) fn usage_by_day(tenants: &[String], bounds: &[u64]) -> Statement {
    let mut binds: Vec<Bind> = bounds
        .iter()
        .map(|&b| Bind::Int(i64::try_from(b).unwrap_or(i64::MAX)))
        .collect();
    let n = bounds.len();
    let days: String = (1..n)
        .map(|i| format!(" WHEN a.t_ms < ${} THEN ${i}", i + 1))
        .collect();
    let mut names = Vec::with_capacity(tenants.len());
    for tenant in tenants {
        binds.push(Bind::Text(tenant.clone()));
        names.push(format!("${}", binds.len()));
    }
    let sql = format!(
        "SELECT tenant, day_start, route, COUNT(*) AS calls, SUM(cost) AS cost_usd FROM (\
         SELECT COALESCE(r.tenant, r.user_id) AS tenant, CASE{days} END AS day_start, \
         a.route AS route, a.cost_usd AS cost \
         FROM attempts a JOIN runs r ON r.run_id = a.run_id \
         WHERE a.kind = 'call' AND a.t_ms >= $1 AND a.t_ms < ${n} \
         AND COALESCE(r.tenant, r.user_id) IN ({})) AS u \
         GROUP BY tenant, day_start, route",
        names.join(", ")
    );
    Statement { sql, binds }
}

/// The tenants of the runs created since `$1`, with their runs and newest run's tier, newest
/// first, at most `$2`. A run that named no tenant is its user's.
pub(super) const RECENT_TENANTS: &str = "SELECT t.tenant AS tenant, t.runs AS runs, \
     t.last_ms AS last_ms, (SELECT r.tier FROM runs r WHERE r.created_ms = t.last_ms \
     AND COALESCE(r.tenant, r.user_id) = t.tenant ORDER BY r.run_id DESC LIMIT 1) AS tier \
     FROM (SELECT COALESCE(tenant, user_id) AS tenant, COUNT(*) AS runs, \
     MAX(created_ms) AS last_ms FROM runs WHERE created_ms >= $1 \
     GROUP BY COALESCE(tenant, user_id)) AS t \
     ORDER BY t.last_ms DESC, t.tenant LIMIT $2";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_bound_and_tenant_is_a_parameter() {
        let s = usage_by_day(&["a".into(), "b'--".into()], &[10, 20, 30]);
        assert!(
            s.sql
                .contains("CASE WHEN a.t_ms < $2 THEN $1 WHEN a.t_ms < $3 THEN $2 END")
        );
        assert!(s.sql.contains("a.t_ms >= $1 AND a.t_ms < $3"));
        assert!(s.sql.contains("IN ($4, $5)"));
        assert!(!s.sql.contains("b'--"));
        assert_eq!(s.binds.len(), 5);
    }
}
