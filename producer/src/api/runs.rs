//! `POST /v1/runs` (enqueue, through the same [`Enqueuer::enqueue`](queue::enqueue::Enqueuer)
//! as the CLI) and `GET /v1/runs/{id}` (scoped by `?user_id=`, see [`super::user`]).

use super::AppState;
use super::error::{ApiError, Body, PathParams};
use super::user::{ForUser, not_found};
use crate::view::RunView;
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use freeway::job::RunRequest;
use queue::enqueue::Outcome;
use std::sync::Arc;

/// `202 {"run_id","status":"queued"}`, also for a repeated idempotency key; `429` while every
/// route rests and the request said `on_rest: refuse`.
pub async fn create(
    State(state): State<Arc<AppState>>,
    Body(body): Body,
) -> Result<Response, ApiError> {
    let request = RunRequest::from_json(&body, state.enqueuer.catalog())
        .map_err(|e| ApiError::InvalidRequest(e.to_string()))?;
    match state.enqueuer.enqueue(request).await? {
        Outcome::Enqueued { run_id } => {
            tracing::info!(%run_id, "run enqueued");
            Ok(accepted(run_id))
        }
        Outcome::Duplicate { run_id } => Ok(accepted(run_id)),
        Outcome::Refused {
            code,
            retry_after_s,
        } => Err(ApiError::Refused {
            code,
            retry_after_s,
        }),
    }
}

fn accepted(run_id: String) -> Response {
    let body = serde_json::json!({ "run_id": run_id, "status": "queued" });
    (StatusCode::ACCEPTED, Json(body)).into_response()
}

pub async fn show(
    State(state): State<Arc<AppState>>,
    PathParams(id): PathParams<String>,
    user: ForUser,
) -> Result<Json<RunView>, ApiError> {
    RunView::load(&state.store, &id)
        .await?
        .filter(|run| user.sees(&run.user_id))
        .map(Json)
        .ok_or_else(|| not_found(&id))
}
