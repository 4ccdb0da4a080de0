//! `POST /v1/runs/{id}/approvals`: a person's answer to the tool call a run is paused on. It
//! enqueues the continuation (docs/design.md §2.4) through [`queue::enqueue::Enqueuer::approve`].

use super::AppState;
use super::audit;
use super::error::{ApiError, JsonBody, PathParams};
use super::user::ForUser;
use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use queue::enqueue::Approval;
use std::sync::Arc;

/// `202 {"run_id": <continuation>}`; `409` unless the run awaits that very tool call.
pub async fn create(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    PathParams(id): PathParams<String>,
    user: ForUser,
    JsonBody(approval): JsonBody<Approval>,
) -> Result<(StatusCode, Json<serde_json::Value>), ApiError> {
    user.run(&state.store, &id).await?;
    let decision = approval.decision.as_str();
    let tool_call = approval.tool_call_id.clone();
    let run_id = state.enqueuer.approve(&id, approval).await?;
    let by = audit::actor_name(&state, &headers, user.0.as_deref());
    let detail = format!("{decision} of tool call {tool_call}; continues as {run_id}");
    audit::record(&state, &by, decision, &id, &detail).await;
    Ok((
        StatusCode::ACCEPTED,
        Json(serde_json::json!({ "run_id": run_id })),
    ))
}
