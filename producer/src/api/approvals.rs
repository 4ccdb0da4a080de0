//! `POST /v1/runs/{id}/approvals`: a person's answer to the tool call a run is paused on. It
//! enqueues the continuation (docs/design.md §2.4) through [`queue::enqueue::Enqueuer::approve`].

use super::audit;
use super::error::{ApiError, JsonBody, PathParams};
use super::state::AppState;
use super::user::ForUser;
use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use queue::enqueue::Approval;
use std::sync::Arc;

/// The run that continues after the answer: it tries the tool call's outcome once.
#[derive(serde::Serialize, utoipa::ToSchema)]
pub struct Continuation {
    run_id: String,
}

/// `202 {"run_id": <continuation>}`; `409` unless the run awaits that very tool call.
#[utoipa::path(
    post, operation_id = "answerApproval", path = "/v1/runs/{id}/approvals", tag = "runs",
    params(("id" = String, Path, description = "The run awaiting approval"), crate::api::user::UserQuery),
    request_body = queue::enqueue::Approval,
    responses((status = 202, description = "The continuation is queued", body = Continuation),
        (status = 404, description = "No such run", body = crate::api::error::ErrorBody), (status = 409, description = "The run does not await that tool call", body = crate::api::error::ErrorBody))
)]
pub async fn create(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    PathParams(id): PathParams<String>,
    user: ForUser,
    JsonBody(approval): JsonBody<Approval>,
) -> Result<(StatusCode, Json<Continuation>), ApiError> {
    user.run(&state.store, &id).await?;
    let decision = approval.decision.as_str();
    let tool_call = approval.tool_call_id.clone();
    let run_id = state.enqueuer.approve(&id, approval).await?;
    let by = audit::actor_name(&state, &headers, user.0.as_deref());
    let detail = format!("{decision} of tool call {tool_call}; continues as {run_id}");
    audit::record(&state, &by, decision, &id, &detail).await;
    Ok((StatusCode::ACCEPTED, Json(Continuation { run_id })))
}
