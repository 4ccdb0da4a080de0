//! `POST /v1/runs/{id}/approvals`: a person's answer to the tool call a run is paused on. It
//! enqueues the continuation (docs/design.md §2.4) through [`queue::enqueue::Enqueuer::approve`].

use super::AppState;
use super::error::{ApiError, JsonBody, PathParams};
use super::user::ForUser;
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use queue::enqueue::Approval;
use std::sync::Arc;

/// `202 {"run_id": <continuation>}`; `409` unless the run awaits that very tool call.
pub async fn create(
    State(state): State<Arc<AppState>>,
    PathParams(id): PathParams<String>,
    user: ForUser,
    JsonBody(approval): JsonBody<Approval>,
) -> Result<(StatusCode, Json<serde_json::Value>), ApiError> {
    user.run(&state.store, &id).await?;
    let run_id = state.enqueuer.approve(&id, approval).await?;
    Ok((
        StatusCode::ACCEPTED,
        Json(serde_json::json!({ "run_id": run_id })),
    ))
}
