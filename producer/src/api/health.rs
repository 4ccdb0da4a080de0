//! `GET /healthz` (Redis and store reachability) and `GET /metrics` (Prometheus text).
//!
//! The metrics are the few that come cheaply: queue depths by state and active rests by scope.
//! Runs by status are not exported yet: the store has no counting query, and scanning runs on
//! every scrape would cost in proportion to history. A later issue builds the full set.

use super::AppState;
use super::error::ApiError;
use axum::Json;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use freeway::store::Store;
use std::fmt::Write;
use std::sync::Arc;

/// A run id no run has: reading it proves the store answers.
const PROBE_RUN: &str = "healthz-probe";

/// `200 {"redis":"ok","store":"ok"}`, or `503` with `"failed"` for what did not answer.
pub async fn healthz(State(state): State<Arc<AppState>>) -> impl IntoResponse {
    let mut conn = state.enqueuer.connection();
    let redis = match redis::cmd("PING").query_async::<String>(&mut conn).await {
        Ok(_) => "ok",
        Err(error) => {
            tracing::warn!(%error, "healthz: redis failed");
            "failed"
        }
    };
    let store = match state.store.run(PROBE_RUN).await {
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

pub async fn metrics(State(state): State<Arc<AppState>>) -> Result<impl IntoResponse, ApiError> {
    let depths = state
        .enqueuer
        .queue()
        .depths()
        .await
        .map_err(|e| ApiError::unavailable("redis", &e))?;
    let rests = state
        .enqueuer
        .rests()
        .list()
        .await
        .map_err(|e| ApiError::unavailable("redis", &e))?;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# HELP freeway_queue_jobs Jobs in the run queue, by state.\n# TYPE freeway_queue_jobs gauge"
    );
    for (name, n) in [
        ("waiting", depths.waiting),
        ("scheduled", depths.scheduled),
        ("delayed", depths.delayed),
        ("running", depths.running),
        ("done", depths.done),
        ("dead", depths.dead),
    ] {
        let _ = writeln!(out, "freeway_queue_jobs{{state=\"{name}\"}} {n}");
    }
    let _ = writeln!(
        out,
        "# HELP freeway_active_rests Active rests and circuits, by scope.\n# TYPE freeway_active_rests gauge"
    );
    for scope in ["pool", "route", "connection"] {
        let n = rests.iter().filter(|r| r.scope == scope).count();
        let _ = writeln!(out, "freeway_active_rests{{scope=\"{scope}\"}} {n}");
    }
    Ok((
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        out,
    ))
}
