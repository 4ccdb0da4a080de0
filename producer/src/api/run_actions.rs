//! `POST /v1/runs/{id}/cancel`, `/retry` and `/wake`: acting on a run after it was enqueued
//! (docs/api.md). A caller scoped to one user (`?user_id=`) acts on that user's runs with the
//! API token; acting on any run is the operator's and needs the admin token. Every action is
//! in the audit trail ([`super::audit`]) with who asked.

use super::audit;
use super::auth::require_admin;
use super::error::{ApiError, PathParams};
use super::runs::{accepted, enqueued};
use super::state::AppState;
use super::user::ForUser;
use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use queue::{Cancelled, Woken};
use serde::Serialize;
use std::sync::Arc;

/// Who is acting, for the audit: a caller scoped to one user acts on that user's runs; acting
/// on any run needs the admin token.
fn actor(state: &AppState, headers: &HeaderMap, user: &ForUser) -> Result<String, ApiError> {
    if user.0.is_none() {
        require_admin(&state.tokens, headers)?;
    }
    Ok(audit::actor_name(state, headers, user.0.as_deref()))
}

/// `202 {"run_id","status"}`: `cancelled`, or `running` while its executor stops it.
#[utoipa::path(
    post, operation_id = "cancelRun", path = "/v1/runs/{id}/cancel", tag = "runs",
    params(("id" = String, Path, description = "The run id"), crate::api::user::UserQuery),
    responses((status = 202, description = "Cancelled, or stopping before its next call", body = CancelAnswer),
        (status = 404, description = "No such run", body = crate::api::error::ErrorBody), (status = 409, description = "The run has ended", body = crate::api::error::ErrorBody))
)]
pub async fn cancel(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    PathParams(id): PathParams<String>,
    user: ForUser,
) -> Result<Response, ApiError> {
    let by = actor(&state, &headers, &user)?;
    let cancelled = state.enqueuer.cancel(&id, user.0.as_deref(), &by).await?;
    let status = match cancelled {
        Cancelled::Now => "cancelled",
        Cancelled::BeforeNextCall => "running",
    };
    let detail = match cancelled {
        Cancelled::Now => "cancelled",
        Cancelled::BeforeNextCall => "cancelled: it stops before its next call",
    };
    audit::record(&state, &by, "cancel", &id, detail).await;
    let body = CancelAnswer { run_id: id, status };
    Ok((StatusCode::ACCEPTED, Json(body)).into_response())
}

/// `202 {"run_id","status":"queued"}` for the new run; `409` for a run that did not end
/// failed, refused or cancelled.
#[utoipa::path(
    post, operation_id = "retryRun", path = "/v1/runs/{id}/retry", tag = "runs",
    params(("id" = String, Path, description = "A failed, refused or cancelled run"), crate::api::user::UserQuery),
    responses((status = 202, description = "The new run is queued", body = super::runs::Accepted),
        (status = 404, description = "No such run", body = crate::api::error::ErrorBody), (status = 409, description = "The run did not end failed, refused or cancelled", body = crate::api::error::ErrorBody))
)]
pub async fn retry(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    PathParams(id): PathParams<String>,
    user: ForUser,
) -> Result<Response, ApiError> {
    let by = actor(&state, &headers, &user)?;
    let (outcome, deadline_s) = state.enqueuer.retry(&id, user.0.as_deref()).await?;
    let run_id = enqueued(outcome)?;
    audit::record(&state, &by, "retry", &id, &format!("retried as {run_id}")).await;
    Ok(accepted(&state, run_id, deadline_s))
}

/// What a cancel did: the run is `cancelled`, or still `running` until its executor stops it
/// before its next call.
#[derive(Serialize, utoipa::ToSchema)]
pub struct CancelAnswer {
    run_id: String,
    #[schema(value_type = String, example = "cancelled")]
    status: &'static str,
}

/// What "run now" did, in the run's terms: `queued` (woken, it runs now) or still `delayed`
/// (its routes are closed: it waits until `until_ms`, and `message` says for what).
#[derive(Serialize, utoipa::ToSchema)]
pub struct WakeAnswer {
    run_id: String,
    #[schema(value_type = String, example = "queued")]
    status: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    until_ms: Option<u64>,
    message: String,
}

/// `200` with what will really happen; `409` for a run that is not delayed.
#[utoipa::path(
    post, operation_id = "wakeRun", path = "/v1/runs/{id}/wake", tag = "runs",
    params(("id" = String, Path, description = "A delayed run"), crate::api::user::UserQuery),
    responses((status = 200, description = "Woken, or still delayed and why", body = WakeAnswer),
        (status = 404, description = "No such run", body = crate::api::error::ErrorBody), (status = 409, description = "The run is not delayed", body = crate::api::error::ErrorBody))
)]
pub async fn wake(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    PathParams(id): PathParams<String>,
    user: ForUser,
) -> Result<Json<WakeAnswer>, ApiError> {
    let by = actor(&state, &headers, &user)?;
    let woken = state.enqueuer.wake(&id, user.0.as_deref()).await?;
    let answer = match woken {
        Woken::Now => {
            audit::record(&state, &by, "wake", &id, "woken: it runs now").await;
            WakeAnswer {
                run_id: id,
                status: "queued",
                until_ms: None,
                message: "woken: it runs now, through its pool's limiter".to_string(),
            }
        }
        Woken::Waits { until_ms, reason } => {
            let in_s = until_ms
                .saturating_sub(freeway::clock::epoch_ms())
                .div_ceil(1000);
            let detail = format!("not woken: {reason}; it waits {in_s} s more");
            audit::record(&state, &by, "wake", &id, &detail).await;
            WakeAnswer {
                run_id: id,
                status: "delayed",
                until_ms: Some(until_ms),
                message: format!("not woken: {reason}; it waits {in_s} s more"),
            }
        }
    };
    Ok(Json(answer))
}
