//! `GET /v1/tenants` and `GET /v1/tenants/{id}/usage` (docs/api.md §1, docs/design.md §4.8):
//! what tenants spend today against their caps, and what their calls cost by route and by day.
//!
//! Today's spend and what reservations hold come from the fleet's ledger in Redis, the figures the
//! caps are checked against; calls and their cost by route and day come from the store's attempt
//! log. A run with neither a tier cap nor `max_usd` asks the ledger nothing (its calls' cost is
//! recorded with its attempts only), so for a tier without a cap today's spend is the attempt log's
//! (`spend_from` says which). A tier belongs to runs, not to tenants, so the tier whose cap and day
//! clock apply is the one asked for (`?tier=`), else the tier of the tenant's newest run, else
//! `default`; the answer says which.
//!
//! A tenant is not a user: the web app's backend asks with the API token. The answers hold
//! aggregates of that tenant's runs only (no run, user or output).

use super::error::{ApiError, PathParams};
use super::state::AppState;
use axum::Json;
use axum::extract::{Query, State, rejection::QueryRejection};
use freeway::catalog::{Catalog, DEFAULT_TIER, Tier};
use freeway::day::{last_days, next_midnight_ms};
use freeway::job::is_id;
use freeway::spend::{Ledger, LedgerId, TenantSpend};
use freeway::store::{RunFilter, Store};
use futures_util::future::try_join_all;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// The days `GET /v1/tenants/{id}/usage` reads, today included.
pub const USAGE_DAYS: u32 = 30;
/// The most tenants `GET /v1/tenants` lists (and its default).
pub const MAX_TENANTS: u32 = 100;
/// How far back `GET /v1/tenants` looks for runs: a day.
pub const SEEN_MS: u64 = 24 * 3600 * 1000;

const BAD_ID: &str = "tenant id must match [A-Za-z0-9_.:-]{1,128}";

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct UsageQuery {
    tier: Option<String>,
}

/// Where the tier of a usage answer came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum TierFrom {
    /// `?tier=`.
    Query,
    /// The tenant's newest run.
    LatestRun,
    /// The tenant has no run stored: `default`.
    Default,
}

/// Where a `spend_usd` comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum SpendFrom {
    /// The fleet's ledger: the tier has a cap, and every priced call is held against it.
    Ledger,
    /// The attempt log: without a cap the ledger counts only the calls of runs with `max_usd`.
    AttemptLog,
}

impl SpendFrom {
    /// Today's spend of a tenant whose tier caps at `cap_usd`: the ledger's `spent` with a cap,
    /// else `logged` (today's cost in the attempt log).
    fn pick(cap_usd: Option<f64>, ledger: &TenantSpend, logged: f64) -> (f64, SpendFrom) {
        match cap_usd {
            Some(_) => (ledger.spent.usd(), SpendFrom::Ledger),
            None => (logged, SpendFrom::AttemptLog),
        }
    }
}

/// One route's calls today.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct RouteUse {
    route: String,
    calls: u64,
    cost_usd: f64,
}

/// One day's calls, on the tier's day clock.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct DayUse {
    /// `YYYY-MM-DD` on the tier's `day_reset` clock.
    day: String,
    start_ms: u64,
    calls: u64,
    cost_usd: f64,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct TenantUsage {
    tenant: String,
    tier: String,
    tier_from: TierFrom,
    /// The zone whose midnight starts the tier's day.
    day_reset: &'static str,
    /// Today on that clock, `YYYY-MM-DD`, and its bounds (epoch ms).
    day: String,
    day_started_ms: u64,
    day_ends_ms: u64,
    /// Spent today on priced routes: fleet-wide from the ledger the cap is checked against
    /// when the tier has one, else the attempt log's cost (see `spend_from`).
    spend_usd: f64,
    spend_from: SpendFrom,
    /// Held now by reservations of priced calls in flight.
    reserved_usd: f64,
    /// The tier's `spend_usd_per_day`; `null`: no cap.
    cap_usd: Option<f64>,
    /// Today's calls and what they cost, from the attempt log.
    calls: u64,
    cost_usd: f64,
    /// Today's calls by route, the costliest first.
    routes: Vec<RouteUse>,
    /// The last [`USAGE_DAYS`] days, oldest first, today last; days without a call are zeros.
    days: Vec<DayUse>,
}

/// A tier's cap and clock: an unknown tier (taken off the configuration since its runs were
/// enqueued) is weighed and capped as the engine does, as the built-in `default`.
fn settings(catalog: &Catalog, tier: &str) -> Tier {
    catalog.tier(tier).cloned().unwrap_or_default()
}

/// What the ledger holds for `tenant` today; zeros for an id it cannot key (none the API
/// takes).
async fn ledger_usage(
    state: &AppState,
    tenant: &str,
    day_end_ms: u64,
) -> Result<TenantSpend, ApiError> {
    match LedgerId::new(tenant) {
        Ok(id) => Ok(state.fleet.ledger().usage(&id, day_end_ms).await?),
        Err(_) => Ok(TenantSpend::default()),
    }
}

/// `GET /v1/tenants/{id}/usage?tier=`.
#[utoipa::path(
    get, operation_id = "tenantUsage", path = "/v1/tenants/{id}/usage", tag = "operations",
    params(("id" = String, Path, description = "The tenant"), UsageQuery),
    responses((status = 200, description = "Today's spend and 30 days by day", body = TenantUsage))
)]
pub async fn usage(
    State(state): State<Arc<AppState>>,
    PathParams(tenant): PathParams<String>,
    query: Result<Query<UsageQuery>, QueryRejection>,
) -> Result<Json<TenantUsage>, ApiError> {
    if !is_id(&tenant) {
        return Err(ApiError::InvalidRequest(BAD_ID.into()));
    }
    let Query(query) = query.map_err(|r| ApiError::InvalidRequest(r.body_text()))?;
    let catalog = state.enqueuer.catalog();
    let (tier, tier_from) = match query.tier.filter(|t| !t.trim().is_empty()) {
        Some(tier) if catalog.tier(&tier).is_some() => (tier, TierFrom::Query),
        Some(tier) => {
            return Err(ApiError::InvalidRequest(format!(
                "tier {tier:?} is not configured (tiers: {})",
                catalog.tier_names()
            )));
        }
        None => {
            let newest = RunFilter {
                tenant: Some(tenant.clone()),
                ..RunFilter::default()
            };
            let page = state.store.list_runs(&newest, None, 1).await?;
            match page.runs.into_iter().next() {
                Some(run) => (run.tier, TierFrom::LatestRun),
                None => (DEFAULT_TIER.to_string(), TierFrom::Default),
            }
        }
    };
    let tier_settings = settings(catalog, &tier);
    let zone = tier_settings.day_reset;
    let now = freeway::clock::epoch_ms();
    let days = last_days(zone, now, USAGE_DAYS);
    let day_end = next_midnight_ms(zone, now);
    let Some(today) = days.last().cloned() else {
        return Err(ApiError::unavailable(
            "the day clock",
            &"no day at this time",
        ));
    };
    let mut bounds: Vec<u64> = days.iter().map(|d| d.start_ms).collect();
    bounds.push(day_end);
    let spend = ledger_usage(&state, &tenant, day_end).await?;
    let rows = state
        .store
        .usage_by_day(std::slice::from_ref(&tenant), &bounds)
        .await?;

    let mut by_day: HashMap<u64, (u64, f64)> = HashMap::new();
    let mut routes = Vec::new();
    for r in rows {
        let day = by_day.entry(r.day_start_ms).or_default();
        day.0 += r.calls;
        day.1 += r.cost_usd;
        if r.day_start_ms == today.start_ms {
            routes.push(RouteUse {
                route: r.route,
                calls: r.calls,
                cost_usd: r.cost_usd,
            });
        }
    }
    routes.sort_by(|a, b| {
        b.cost_usd
            .total_cmp(&a.cost_usd)
            .then(b.calls.cmp(&a.calls))
            .then_with(|| a.route.cmp(&b.route))
    });
    let (calls, cost_usd) = by_day.get(&today.start_ms).copied().unwrap_or_default();
    let days = days
        .into_iter()
        .map(|d| {
            let (calls, cost_usd) = by_day.get(&d.start_ms).copied().unwrap_or_default();
            DayUse {
                day: d.date,
                start_ms: d.start_ms,
                calls,
                cost_usd,
            }
        })
        .collect();
    let cap_usd = tier_settings.spend_usd_per_day;
    let (spend_usd, spend_from) = SpendFrom::pick(cap_usd, &spend, cost_usd);
    Ok(Json(TenantUsage {
        tenant,
        tier,
        tier_from,
        day_reset: zone.name(),
        day: today.date,
        day_started_ms: today.start_ms,
        day_ends_ms: day_end,
        spend_usd,
        spend_from,
        reserved_usd: spend.reserved.usd(),
        cap_usd,
        calls,
        cost_usd,
        routes,
        days,
    }))
}

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    limit: Option<u32>,
}

/// A tenant of the last day's runs, as the board's spend by tenant shows it.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct TenantLine {
    tenant: String,
    /// The tier of its newest run: its cap and day clock apply below.
    tier: String,
    /// Its runs created in the last 24 hours.
    runs: u64,
    last_run_ms: u64,
    /// When its tier's day ends (epoch ms).
    day_ends_ms: u64,
    /// Today's spend and where it comes from, as in the usage; what reservations hold now.
    spend_usd: f64,
    spend_from: SpendFrom,
    reserved_usd: f64,
    cap_usd: Option<f64>,
    /// Today's calls and what they cost, from the attempt log.
    calls: u64,
    cost_usd: f64,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct TenantList {
    /// Runs created from this moment on were looked at (epoch ms).
    since_ms: u64,
    /// The tenant with the newest run first.
    tenants: Vec<TenantLine>,
}

/// `GET /v1/tenants?limit=`: the tenants of the last day's runs, newest run first.
#[utoipa::path(
    get, operation_id = "listTenants", path = "/v1/tenants", tag = "operations",
    params(ListQuery),
    responses((status = 200, description = "The tenants of the last day's runs", body = TenantList))
)]
pub async fn list(
    State(state): State<Arc<AppState>>,
    query: Result<Query<ListQuery>, QueryRejection>,
) -> Result<Json<TenantList>, ApiError> {
    let Query(query) = query.map_err(|r| ApiError::InvalidRequest(r.body_text()))?;
    let limit = query.limit.unwrap_or(MAX_TENANTS);
    if !(1..=MAX_TENANTS).contains(&limit) {
        return Err(ApiError::InvalidRequest(format!(
            "limit must be 1-{MAX_TENANTS}"
        )));
    }
    let catalog = state.enqueuer.catalog();
    let now = freeway::clock::epoch_ms();
    let since_ms = now.saturating_sub(SEEN_MS);
    let seen = state.store.recent_tenants(since_ms, limit).await?;

    // Each tenant's today is its tier's: one read of the attempt log per distinct day.
    let mut days: BTreeMap<(u64, u64), Vec<String>> = BTreeMap::new();
    let mut today = Vec::with_capacity(seen.len());
    for t in &seen {
        let zone = settings(catalog, &t.tier).day_reset;
        let end = next_midnight_ms(zone, now);
        let start = last_days(zone, now, 1).first().map_or(now, |d| d.start_ms);
        days.entry((start, end)).or_default().push(t.tenant.clone());
        today.push((start, end));
    }
    let mut used: HashMap<(String, u64), (u64, f64)> = HashMap::new();
    for ((start, end), tenants) in &days {
        for r in state.store.usage_by_day(tenants, &[*start, *end]).await? {
            let sum: &mut (u64, f64) = used.entry((r.tenant, *start)).or_default();
            sum.0 += r.calls;
            sum.1 += r.cost_usd;
        }
    }
    let spends = try_join_all(
        seen.iter()
            .zip(&today)
            .map(|(t, (_, end))| ledger_usage(&state, &t.tenant, *end)),
    )
    .await?;
    let tenants = seen
        .into_iter()
        .zip(today)
        .zip(spends)
        .map(|((t, (start, end)), spend)| {
            let (calls, cost_usd) = used.remove(&(t.tenant.clone(), start)).unwrap_or_default();
            let cap_usd = settings(catalog, &t.tier).spend_usd_per_day;
            let (spend_usd, spend_from) = SpendFrom::pick(cap_usd, &spend, cost_usd);
            TenantLine {
                cap_usd,
                tenant: t.tenant,
                tier: t.tier,
                runs: t.runs,
                last_run_ms: t.last_run_ms,
                day_ends_ms: end,
                spend_usd,
                spend_from,
                reserved_usd: spend.reserved.usd(),
                calls,
                cost_usd,
            }
        })
        .collect();
    Ok(Json(TenantList { since_ms, tenants }))
}
