//! `GET /healthz`: Redis taking writes, and the store's writers taking writes: the producer's own
//! and every worker replica's (each reports its probe, `queue::health`), for a liveness probe.
//! (`GET /metrics` is in [`super::metrics`].)

use super::state::AppState;
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use std::sync::Arc;

/// What takes writes: `ok` or `failed` for Redis and for the store.
#[derive(serde::Serialize, utoipa::ToSchema)]
pub struct Health {
    #[schema(value_type = String, example = "ok")]
    redis: &'static str,
    #[schema(value_type = String, example = "ok")]
    store: &'static str,
    /// Each replica (or `producer`) whose store writer fails, with its error.
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    writers: std::collections::BTreeMap<String, String>,
}

/// `200 {"redis":"ok","store":"ok"}`, or `503` with `"failed"` for what does not take writes,
/// and under `"writers"` each replica whose store writer fails, with its error.
#[utoipa::path(
    get, operation_id = "health", path = "/healthz", tag = "health",
    responses((status = 200, description = "Redis and the store take writes", body = Health),
        (status = 503, description = "Something does not take writes", body = Health))
)]
pub async fn healthz(State(state): State<Arc<AppState>>) -> impl IntoResponse {
    let health = queue::Health::new(state.fleet.connection(), state.fleet.namespace());
    let redis = match health.redis_writable().await {
        Ok(()) => "ok",
        Err(error) => {
            tracing::warn!(%error, "healthz: redis takes no writes");
            "failed"
        }
    };
    let mut failing = Vec::new();
    if let Err(error) = state.store.check_writable().await {
        tracing::warn!(%error, "healthz: the producer's store writer failed");
        failing.push(("producer".to_string(), error.to_string()));
    }
    match health.fleet().await {
        Ok(fleet) => failing.extend(fleet.failing_writers),
        Err(error) => tracing::warn!(%error, "healthz: cannot read the replicas' reports"),
    }
    let store = if failing.is_empty() { "ok" } else { "failed" };
    let status = if redis == "ok" && store == "ok" {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let body = Health {
        redis,
        store,
        writers: failing.into_iter().collect(),
    };
    (status, Json(body))
}
