//! `GET /v1/pools` and `GET /v1/providers`: the shapes freeway knows, and how each stands.
//!
//! An operator who pairs free tiers by shape needs to see them side by side: each pool's
//! limits, window and day clock, with the rests that close any of its instances right now (a
//! per-key pool has one instance per connection, `{pool}@{connection}`). Use and pace arrive
//! with pacing.

use super::AppState;
use super::error::ApiError;
use axum::Json;
use axum::extract::State;
use freeway::catalog::{Pool, Provider};
use freeway::rest::{ActiveRest, Rests};
use serde::Serialize;
use std::sync::Arc;

#[derive(Serialize)]
pub struct PoolList {
    pools: Vec<PoolView>,
}

#[derive(Serialize)]
struct PoolView {
    #[serde(flatten)]
    pool: Pool,
    /// The pool rests of its instances, longest first.
    rests: Vec<InstanceRest>,
}

#[derive(Serialize)]
struct InstanceRest {
    instance: String,
    remaining_ms: u64,
    reason: String,
}

pub async fn pools(State(state): State<Arc<AppState>>) -> Result<Json<PoolList>, ApiError> {
    let rests = state.enqueuer.rests().list().await?;
    let catalog = state.enqueuer.catalog();
    let pools = catalog
        .pools()
        .map(|pool| PoolView {
            rests: rests_of(pool, &rests),
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
        })
        .collect();
    out.sort_by_key(|r| std::cmp::Reverse(r.remaining_ms));
    out
}

#[derive(Serialize)]
pub struct ProviderList {
    providers: Vec<ProviderView>,
}

#[derive(Serialize)]
struct ProviderView {
    #[serde(flatten)]
    provider: Provider,
    /// The pools that spend this provider's quotas.
    pools: Vec<String>,
}

pub async fn providers(State(state): State<Arc<AppState>>) -> Json<ProviderList> {
    let catalog = state.enqueuer.catalog();
    let providers = catalog
        .providers()
        .map(|provider| ProviderView {
            pools: catalog
                .pools()
                .filter(|p| p.provider == provider.name)
                .map(|p| p.name.clone())
                .collect(),
            provider: provider.clone(),
        })
        .collect();
    Json(ProviderList { providers })
}
