//! `GET /v1/rests` (every active rest and circuit), `POST /v1/rests/{scope}/{key}`, the
//! operator's pause of a pool instance or a route (a rest with the operator's reason), and
//! `DELETE /v1/rests/{scope}/{key}`, the operator's clear (and resume): the only way to shorten a
//! rest (docs/design.md §3). Both need the admin token and are in the audit trail (what and by
//! which credential, never the token itself).
//!
//! A pause is a rest, not a second mechanism: runs on a paused route are delayed or refused as
//! for any rest, every replica sees it at once, and a resume wakes them through the limiter.

use super::audit;
use super::auth::require_admin;
use super::error::{ApiError, JsonBody, PathParams};
use super::state::AppState;
use axum::Json;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use freeway::classify::{LONG_REST_CAP_MS, RestLength, RestScope};
use freeway::pace::Pacer;
use freeway::rest::{ActiveRest, Rests};
use freeway::route::{Route, RouteSpec};
use freeway::store::Store;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// The scopes a rest can have, as [`freeway::rest::Rests::list`] names them.
const SCOPES: [&str; 3] = ["pool", "route", "connection"];

/// How many rests a page lists unless `limit` says otherwise, and the most it may say. Rests of
/// routes no configuration names are bounded (docs/design.md §3.3), but still too many to send
/// every operator at every refresh.
pub const REST_PAGE: usize = 100;
pub const MAX_REST_PAGE: usize = 500;

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct RestQuery {
    /// The `next` of the page before: rests listed after it.
    after: Option<String>,
    /// 1-500, default 100.
    limit: Option<usize>,
}

/// One page of the active rests, sorted by scope and key.
#[derive(Serialize, utoipa::ToSchema)]
pub struct RestList {
    rests: Vec<ActiveRest>,
    /// How many rests and circuits are active in all.
    total: usize,
    /// The `after` of the next page (`<scope>/<key>`); `null` on the last.
    next: Option<String>,
}

impl RestList {
    /// The page of `listed` (sorted by scope and key, as [`Rests::list`] gives them) after
    /// `after`, at most `limit` long.
    pub fn page(listed: Vec<ActiveRest>, after: Option<&str>, limit: usize) -> RestList {
        let total = listed.len();
        let after = after.and_then(|a| a.split_once('/'));
        let mut rests: Vec<ActiveRest> = listed
            .into_iter()
            .filter(|r| {
                after.is_none_or(|(scope, key)| (r.scope.as_str(), r.key.as_str()) > (scope, key))
            })
            .take(limit + 1)
            .collect();
        let next = (rests.len() > limit).then(|| {
            rests.truncate(limit);
            rests
                .last()
                .map(|r| format!("{}/{}", r.scope, r.key))
                .unwrap_or_default()
        });
        RestList { rests, total, next }
    }
}

/// `GET /v1/rests?after=&limit=`: the active rests and circuits, a page at a time.
#[utoipa::path(
    get, operation_id = "listRests", path = "/v1/rests", tag = "operations",
    params(RestQuery),
    responses((status = 200, description = "Active rests and circuits, by scope and key", body = RestList))
)]
pub async fn list(
    State(state): State<Arc<AppState>>,
    query: Result<Query<RestQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<RestList>, ApiError> {
    let Query(query) = query.map_err(|r| ApiError::InvalidRequest(r.body_text()))?;
    let limit = query.limit.unwrap_or(REST_PAGE);
    if !(1..=MAX_REST_PAGE).contains(&limit) {
        return Err(ApiError::InvalidRequest(format!(
            "limit must be 1-{MAX_REST_PAGE}"
        )));
    }
    let listed = state.fleet.rests().list().await?;
    let after = query.after.as_deref().filter(|a| !a.is_empty());
    Ok(Json(RestList::page(listed, after, limit)))
}

/// `204` when a rest was cleared, `404` when nothing rested there. A route key may hold `/`
/// (`openrouter/vendor/model:free`): the path's tail is the key.
#[utoipa::path(
    delete, operation_id = "clearRest", path = "/v1/rests/{scope}/{key}", tag = "operations",
    params(("scope" = String, Path, description = "account, pool, route, upstream or circuit"),
        ("key" = String, Path, description = "The rest's key; may hold `/`")),
    responses((status = 204, description = "Cleared"), (status = 404, description = "Nothing rested there", body = crate::api::error::ErrorBody))
)]
pub async fn clear(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    PathParams((scope, key)): PathParams<(String, String)>,
) -> Result<StatusCode, ApiError> {
    require_admin(&state.tokens, &headers)?;
    if !SCOPES.contains(&scope.as_str()) {
        return Err(ApiError::InvalidRequest(format!(
            "scope must be one of pool, route, connection; got {scope:?}"
        )));
    }
    let removed = state.fleet.rests().clear(&scope, &key).await?;
    if removed {
        if scope == "pool" {
            // The operator says the pool's quota is back: its day counts again from zero. Its
            // window keeps its count (the provider's has not forgotten its calls), so the runs
            // woken below are admitted slot by slot, never a window's worth at once.
            state.fleet.pacer().reopen_day(&key).await?;
        }
        // The runs the rest delayed may run now, not at their old wake time; each still passes
        // pre-flight and the pool's limiter.
        let now = freeway::clock::epoch_ms();
        let detail = match state.enqueuer.queue().wake_parked(now).await {
            Ok(woken) => {
                format!("reopened; {woken} delayed runs woken, each through its pool's limiter")
            }
            Err(error) => {
                tracing::warn!(%error, "waking parked runs failed; they wake at their time");
                "reopened; the delayed runs wake at their own time".to_string()
            }
        };
        audit::record(
            &state,
            audit::ADMIN,
            "clear",
            &format!("{scope}/{key}"),
            &detail,
        )
        .await;
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::NotFound(format!("no {scope} rest on {key}")))
    }
}

/// The longest pause, in seconds: the longest rest there is (a spent day's).
pub const MAX_PAUSE_S: u64 = LONG_REST_CAP_MS / 1000;
/// The longest reason kept.
const MAX_REASON: usize = 200;

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Pause {
    /// Why, for the board, the runs' `delayed` events and the audit trail.
    reason: String,
    /// How long, at most [`MAX_PAUSE_S`] (the default): a resume ends it sooner.
    for_s: Option<u64>,
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct Paused {
    scope: String,
    key: String,
    /// How long the scope now rests (longer when it already rested longer).
    remaining_ms: u64,
    message: String,
}

/// `200` with how long the scope now rests. `scope` is `pool` (a pool instance: `openrouter-free`,
/// `groq@conn_…`) or `route` (a route key as the rests list shows it: `platform:groq/llama-3.1-8b`,
/// `conn:conn_…/model`).
#[utoipa::path(
    post, operation_id = "pauseRest", path = "/v1/rests/{scope}/{key}", tag = "operations",
    params(("scope" = String, Path, description = "pool or route"),
        ("key" = String, Path, description = "A pool instance or a route key; may hold `/`")),
    request_body = Pause,
    responses((status = 200, description = "Paused", body = Paused), (status = 404, description = "No such pool or route", body = crate::api::error::ErrorBody))
)]
pub async fn pause(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    PathParams((scope, key)): PathParams<(String, String)>,
    JsonBody(pause): JsonBody<Pause>,
) -> Result<Json<Paused>, ApiError> {
    require_admin(&state.tokens, &headers)?;
    let reason = pause.reason.trim();
    if reason.is_empty() || reason.len() > MAX_REASON || reason.chars().any(char::is_control) {
        return Err(ApiError::InvalidRequest(format!(
            "reason: 1-{MAX_REASON} bytes of text, no control characters"
        )));
    }
    let for_s = pause.for_s.unwrap_or(MAX_PAUSE_S);
    if !(60..=MAX_PAUSE_S).contains(&for_s) {
        return Err(ApiError::InvalidRequest(format!(
            "for_s must be 60-{MAX_PAUSE_S}"
        )));
    }
    let rest_scope = paused_scope(&state, &scope, &key).await?;
    let until = freeway::clock::epoch_ms() + for_s * 1000;
    let why = ActiveRest::pause_reason(reason);
    let remaining_ms = state
        .fleet
        .rests()
        .write(&rest_scope, RestLength::Long(until), &why)
        .await?;
    let message = format!(
        "{scope} {key} rests for {} s: its runs wait (or are refused, with on_rest refuse) until a resume or the end",
        remaining_ms.div_ceil(1000)
    );
    let detail = format!("{why}; for {for_s} s");
    audit::record(
        &state,
        audit::ADMIN,
        "pause",
        &format!("{scope}/{key}"),
        &detail,
    )
    .await;
    Ok(Json(Paused {
        scope,
        key,
        remaining_ms,
        message,
    }))
}

/// The rest a pause of `scope`/`key` writes: only a pool instance or a route the configuration
/// places, so no request can make freeway keep a rest of a name it does not know.
async fn paused_scope(state: &AppState, scope: &str, key: &str) -> Result<RestScope, ApiError> {
    let catalog = state.enqueuer.catalog();
    let unknown = || ApiError::NotFound(format!("no {scope} {key:?} is configured"));
    match scope {
        "pool" => {
            let (pool, connection) = match key.split_once('@') {
                Some((pool, connection)) => (pool, Some(connection)),
                None => (key, None),
            };
            let placed = catalog.instance(pool).is_some()
                && connection
                    .is_none_or(|c| !c.is_empty() && freeway::route::Connection::parse(c).is_ok());
            placed
                .then(|| RestScope::Pool(key.to_string()))
                .ok_or_else(unknown)
        }
        "route" => {
            let (who, model) = key.split_once('/').ok_or_else(unknown)?;
            let spec = match who.split_once(':') {
                Some(("platform", provider)) => RouteSpec {
                    model: model.to_string(),
                    connection: None,
                    provider: Some(provider.to_string()),
                },
                Some(("conn", id)) => {
                    let info = state.store.connection(id).await?.ok_or_else(unknown)?;
                    RouteSpec {
                        model: model.to_string(),
                        connection: Some(id.to_string()),
                        provider: Some(info.provider),
                    }
                }
                _ => return Err(unknown()),
            };
            let route = Route::resolve(&spec, catalog).map_err(|_| unknown())?;
            Ok(RestScope::Route {
                pool: route.pool.clone(),
                route_key: route.key(),
            })
        }
        _ => Err(ApiError::InvalidRequest(format!(
            "a pause is of a pool or a route; got {scope:?}"
        ))),
    }
}
