//! `GET /v1/routes?minutes=N`: each route's last N minutes (1–120, default 60), minute by minute:
//! calls, rate-limited calls, other failures and latency quantiles, with totals, from the
//! per-minute counters every worker adds to ([`freeway::metrics`]). A route that fails before it
//! rests shows here first.

use super::error::ApiError;
use super::state::AppState;
use axum::Json;
use axum::extract::{Query, State, rejection::QueryRejection};
use freeway::metrics::{MINUTES_KEPT, Metrics, RouteMinute, route_minutes};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::Arc;

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct HistoryQuery {
    minutes: Option<u64>,
}

#[derive(Serialize, utoipa::ToSchema)]
struct RouteHistory {
    route: String,
    /// Over the whole span.
    total: RouteMinute,
    /// Minutes with calls, oldest first.
    minutes: Vec<RouteMinute>,
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct History {
    /// The span's first minute, epoch ms.
    from_ms: u64,
    minutes: u64,
    routes: Vec<RouteHistory>,
}

#[utoipa::path(
    get, operation_id = "routeHistory", path = "/v1/routes", tag = "operations",
    params(HistoryQuery),
    responses((status = 200, description = "Each route's calls by minute", body = History))
)]
pub async fn history(
    State(state): State<Arc<AppState>>,
    query: Result<Query<HistoryQuery>, QueryRejection>,
) -> Result<Json<History>, ApiError> {
    let Query(query) = query.map_err(|r| ApiError::InvalidRequest(r.body_text()))?;
    let span = query.minutes.unwrap_or(60);
    if !(1..=MINUTES_KEPT).contains(&span) {
        return Err(ApiError::InvalidRequest(format!(
            "minutes must be 1-{MINUTES_KEPT}"
        )));
    }
    let now = freeway::clock::epoch_ms() / 60_000;
    let from = now + 1 - span;
    let minutes = state.fleet.metrics().minutes(from, now).await?;
    // The totals read the span as one minute, so their quantiles are the span's own.
    let mut merged: HashMap<String, u64> = HashMap::new();
    for (_, fields) in &minutes {
        for (field, n) in fields {
            *merged.entry(field.clone()).or_default() += n;
        }
    }
    let mut totals = route_minutes(&[(from, merged)]);
    let routes = route_minutes(&minutes)
        .into_iter()
        .map(|(route, minutes)| RouteHistory {
            total: totals
                .remove(&route)
                .and_then(|t| t.into_iter().next())
                .unwrap_or_default(),
            route,
            minutes,
        })
        .collect();
    Ok(Json(History {
        from_ms: from * 60_000,
        minutes: span,
        routes,
    }))
}
