//! `GET /healthz`: Redis reachability and the store's writability, for a liveness probe. (`GET
//! /metrics` is in [`super::metrics`].)

use super::AppState;
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use std::sync::Arc;

/// `200 {"redis":"ok","store":"ok"}`, or `503` with `"failed"` for what did not answer.
pub async fn healthz(State(state): State<Arc<AppState>>) -> impl IntoResponse {
    let redis = match state.enqueuer.queue().ping().await {
        Ok(_) => "ok",
        Err(error) => {
            tracing::warn!(%error, "healthz: redis failed");
            "failed"
        }
    };
    let store = match state.store.check_writable().await {
        Ok(_) => "ok",
        Err(error) => {
            tracing::warn!(%error, "healthz: store failed");
            "failed"
        }
    };
    let status = if redis == "ok" && store == "ok" {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (
        status,
        Json(serde_json::json!({ "redis": redis, "store": store })),
    )
}
