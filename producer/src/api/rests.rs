//! `GET /v1/rests` (every active rest and circuit) and `DELETE /v1/rests/{scope}/{key}`, the
//! operator's clear: the only way to shorten a rest (docs/design.md §3), so it needs the admin
//! token and is logged (what and by which credential, never the token itself).

use super::AppState;
use super::auth::require_admin;
use super::error::{ApiError, PathParams};
use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use freeway::pace::Pacer;
use freeway::rest::{ActiveRest, Rests};
use serde::Serialize;
use std::sync::Arc;

/// The scopes a rest can have, as [`freeway::rest::Rests::list`] names them.
const SCOPES: [&str; 3] = ["pool", "route", "connection"];

#[derive(Serialize)]
pub struct RestList {
    rests: Vec<ActiveRest>,
}

pub async fn list(State(state): State<Arc<AppState>>) -> Result<Json<RestList>, ApiError> {
    let rests = state.enqueuer.rests().list().await?;
    Ok(Json(RestList { rests }))
}

/// `204` when a rest was cleared, `404` when nothing rested there. A route key may hold `/`
/// (`openrouter/vendor/model:free`): the path's tail is the key.
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
    let removed = state.enqueuer.rests().clear(&scope, &key).await?;
    tracing::warn!(%scope, %key, removed, by = "admin token", "DELETE /v1/rests: operator clear");
    if removed {
        if scope == "pool" {
            // The operator says the pool's quota is back: its day counts again from zero. Its
            // window keeps its count (the provider's has not forgotten its calls), so the runs
            // woken below are admitted slot by slot, never a window's worth at once.
            state.enqueuer.pacer().reopen_day(&key).await?;
        }
        // The runs the rest delayed may run now, not at their old wake time; each still passes
        // pre-flight and the pool's limiter.
        let now = freeway::clock::epoch_ms();
        match state.enqueuer.queue().wake_parked(now).await {
            Ok(woken) => tracing::info!(woken, "woke parked runs after the clear"),
            Err(error) => {
                tracing::warn!(%error, "waking parked runs failed; they wake at their time")
            }
        }
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::NotFound(format!("no {scope} rest on {key}")))
    }
}
