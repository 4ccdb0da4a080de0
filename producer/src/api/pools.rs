//! `GET /v1/pools` and `GET /v1/providers`: the shapes freeway knows, and how each stands.
//!
//! An operator who pairs free tiers by shape needs to see them side by side: each pool's
//! limits, window and day clock, what the platform's instance has spent this window and today
//! (from the limiter, docs/design.md §4.4), and the rests that close any of its instances right
//! now (a per-key pool has one instance per connection, `{pool}@{connection}`).
//!
//! While runs wait their turn for an instance (docs/design.md §4.7), its use says how many, of
//! how many tenants, and each tenant's slots this window: the platform's instance in `use`, the
//! others (users' own keys of a per-key pool) in `instances`, listed only while runs wait.

use super::error::ApiError;
use super::state::AppState;
use axum::Json;
use axum::extract::State;
use freeway::canary::CanaryRecord;
use freeway::catalog::{Pool, Provider};
use freeway::pace::{Pacer, PoolSeen, PoolUse};
use freeway::rest::{ActiveRest, Rests};
use freeway::store::Store;
use serde::Serialize;
use std::sync::Arc;

#[derive(Serialize, utoipa::ToSchema)]
pub struct PoolList {
    pools: Vec<PoolView>,
}

#[derive(Serialize, utoipa::ToSchema)]
struct PoolView {
    #[serde(flatten)]
    pool: Pool,
    /// What the platform's instance has spent, when the pool declares limits.
    #[serde(rename = "use", skip_serializing_if = "Option::is_none")]
    spent: Option<InstanceUse>,
    /// The pool rests of its instances, longest first.
    rests: Vec<InstanceRest>,
    /// What the provider last said about the platform's instance: the requests an answer said
    /// were left, and the last 429.
    seen: PoolSeen,
    /// The pool's other instances that runs wait for now, with their use (at most
    /// [`MAX_WAITING_INSTANCES`]).
    instances: Vec<InstanceUse>,
}

/// The most instances other than the platform's listed for one pool.
pub const MAX_WAITING_INSTANCES: usize = 50;

/// A pool instance's use, as its limiter counts it.
#[derive(Serialize, utoipa::ToSchema)]
pub(super) struct InstanceUse {
    /// The pool's name (the instance is `name` or `name@platform`).
    #[serde(skip)]
    pub pool: String,
    pub instance: String,
    #[serde(flatten)]
    pub spent: PoolUse,
    /// When the pool's day ends on its day clock (epoch ms): a spent day is closed until then.
    pub day_ends_at_ms: u64,
}

/// The use of every pool's platform instance (`pool`, or `pool@platform` for a per-key pool),
/// for this view and `/metrics`.
pub(super) async fn platform_use(state: &AppState) -> Result<Vec<InstanceUse>, ApiError> {
    let catalog = state.enqueuer.catalog();
    let pacer = state.fleet.pacer();
    let now = freeway::clock::epoch_ms();
    let mut out = Vec::new();
    for pool in catalog.pools() {
        let limits = pool.limits();
        let instance = pool.platform_instance();
        let day_end = catalog.day_clock(pool).day_end_ms(now);
        let spent = pacer.usage(&instance, &limits, day_end).await?;
        out.push(InstanceUse {
            pool: pool.name.clone(),
            instance,
            spent,
            day_ends_at_ms: day_end,
        });
    }
    Ok(out)
}

#[derive(Serialize, utoipa::ToSchema)]
struct InstanceRest {
    instance: String,
    remaining_ms: u64,
    reason: String,
    /// An operator's pause rather than a refusal's rest.
    paused: bool,
}

/// The instances of `pool` other than the platform's that runs wait for, among `waiting` (the
/// limiter's pools with queues), with their use.
async fn waiting_instances(
    state: &AppState,
    pool: &Pool,
    waiting: &[String],
) -> Result<Vec<InstanceUse>, ApiError> {
    let platform = pool.platform_instance();
    let prefix = format!("{}@", pool.name);
    let day_end = state
        .enqueuer
        .catalog()
        .day_clock(pool)
        .day_end_ms(freeway::clock::epoch_ms());
    let pacer = state.fleet.pacer();
    let mut out = Vec::new();
    let others = waiting
        .iter()
        .filter(|i| i.starts_with(&prefix) && **i != platform);
    for instance in others.take(MAX_WAITING_INSTANCES) {
        let spent = pacer.usage(instance, &pool.limits(), day_end).await?;
        if spent.waiting > 0 || !spent.shares.is_empty() {
            out.push(InstanceUse {
                pool: pool.name.clone(),
                instance: instance.clone(),
                spent,
                day_ends_at_ms: day_end,
            });
        }
    }
    Ok(out)
}

#[utoipa::path(
    get, operation_id = "listPools", path = "/v1/pools", tag = "operations",
    responses((status = 200, description = "Each pool instance with its limits and use", body = PoolList))
)]
pub async fn pools(State(state): State<Arc<AppState>>) -> Result<Json<PoolList>, ApiError> {
    let rests = state.fleet.rests().list().await?;
    let mut spent = platform_use(&state).await?;
    let catalog = state.enqueuer.catalog();
    let waiting = state.fleet.pacer().waiting_pools().await?;
    let mut seen = Vec::new();
    let mut instances = Vec::new();
    for pool in catalog.pools() {
        seen.push(state.fleet.pacer().seen(&pool.platform_instance()).await?);
        instances.push(waiting_instances(&state, pool, &waiting).await?);
    }
    let pools = catalog
        .pools()
        .zip(seen)
        .zip(instances)
        .map(|((pool, seen), instances)| PoolView {
            seen,
            instances,
            rests: rests_of(pool, &rests),
            spent: spent
                .iter()
                .position(|u| u.pool == pool.name)
                .map(|i| spent.swap_remove(i)),
            pool: pool.clone(),
        })
        .collect();
    Ok(Json(PoolList { pools }))
}

/// The pool rests whose key is `pool` or one of its instances.
fn rests_of(pool: &Pool, rests: &[ActiveRest]) -> Vec<InstanceRest> {
    let mine = |key: &str| {
        key == pool.name
            || key
                .strip_prefix(pool.name.as_str())
                .is_some_and(|rest| rest.starts_with('@'))
    };
    let mut out: Vec<InstanceRest> = rests
        .iter()
        .filter(|r| r.scope == "pool" && mine(&r.key))
        .map(|r| InstanceRest {
            instance: r.key.clone(),
            remaining_ms: r.remaining_ms,
            reason: r.reason.clone(),
            paused: r.paused,
        })
        .collect();
    out.sort_by_key(|r| std::cmp::Reverse(r.remaining_ms));
    out
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct ProviderList {
    providers: Vec<ProviderView>,
}

#[derive(Serialize, utoipa::ToSchema)]
struct ProviderView {
    #[serde(flatten)]
    provider: Provider,
    /// The pools that spend this provider's quotas.
    pools: Vec<String>,
    /// What the provider's newest canary found; `null` before its first.
    last_canary: Option<CanaryView>,
}

/// A canary as the attempt log keeps it, without the run fields it has none of.
#[derive(Serialize, utoipa::ToSchema)]
pub struct CanaryView {
    route: String,
    t_ms: u64,
    ok: bool,
    http_status: Option<u16>,
    verdict: Option<&'static str>,
    error: Option<String>,
    latency_ms: u64,
    retry_hint_ms: Option<u64>,
    ratelimit_remaining: Option<i64>,
    provider_name: Option<String>,
}

impl From<CanaryRecord> for CanaryView {
    fn from(c: CanaryRecord) -> Self {
        let ok = !c.failed();
        let a = c.attempt;
        CanaryView {
            route: a.route,
            t_ms: a.t_ms,
            ok,
            http_status: a.http_status,
            verdict: a.verdict.map(|v| v.as_str()),
            error: a.error,
            latency_ms: a.latency_ms,
            retry_hint_ms: a.retry_hint_ms,
            ratelimit_remaining: a.ratelimit_remaining,
            provider_name: a.provider_name,
        }
    }
}

#[utoipa::path(
    get, operation_id = "listProviders", path = "/v1/providers", tag = "operations",
    responses((status = 200, description = "Each provider with its last canary", body = ProviderList))
)]
pub async fn providers(State(state): State<Arc<AppState>>) -> Result<Json<ProviderList>, ApiError> {
    let catalog = state.enqueuer.catalog();
    let mut canaries = state.store.last_canaries().await?;
    let providers = catalog
        .providers()
        .map(|provider| ProviderView {
            pools: catalog
                .pools()
                .filter(|p| p.provider == provider.name)
                .map(|p| p.name.clone())
                .collect(),
            last_canary: canaries
                .iter()
                .position(|c| c.provider == provider.name)
                .map(|i| canaries.swap_remove(i).into()),
            provider: provider.clone(),
        })
        .collect();
    Ok(Json(ProviderList { providers }))
}
