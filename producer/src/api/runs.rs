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
use freeway::job::{DEFAULT_DEADLINE_S, RunRequest};
use queue::enqueue::Outcome;
use std::sync::Arc;

/// `202 {"run_id","status":"queued"}`, also for a repeated idempotency key; `429` while every
/// route rests and the run's `on_rest` is `refuse` (an interactive run's default).
pub async fn create(
    State(state): State<Arc<AppState>>,
    Body(body): Body,
) -> Result<Response, ApiError> {
    let (run_id, deadline_s) = enqueue_one(&state, &body).await?;
    Ok(accepted(&state, run_id, deadline_s))
}

/// Validate and enqueue one run body; its run id and deadline.
async fn enqueue_one(state: &AppState, body: &[u8]) -> Result<(String, u64), ApiError> {
    let request = RunRequest::from_json(body, state.enqueuer.catalog())
        .map_err(|e| ApiError::InvalidRequest(e.to_string()))?;
    let deadline_s = request.deadline_s.unwrap_or(DEFAULT_DEADLINE_S);
    Ok((
        enqueued(state.enqueuer.enqueue(request).await?)?,
        deadline_s,
    ))
}

/// The run an enqueue made (or found by its idempotency key); its refusal as the API's `429`.
pub(super) fn enqueued(outcome: Outcome) -> Result<String, ApiError> {
    match outcome {
        Outcome::Enqueued { run_id } => {
            tracing::info!(%run_id, "run enqueued");
            Ok(run_id)
        }
        Outcome::Duplicate { run_id } => Ok(run_id),
        Outcome::Refused {
            code,
            retry_after_s,
        } => Err(ApiError::Refused {
            code,
            retry_after_s,
        }),
    }
}

/// The most runs one `POST /v1/runs:batch` takes.
pub const MAX_BATCH: usize = 1_000;

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Batch {
    runs: Vec<serde_json::Value>,
}

/// `POST /v1/runs:batch {"runs":[…]}`: `200 {"results":[…]}`, one per body in order: what
/// `POST /v1/runs` would have answered (`{"status":202,"run_id"}` or `{"status":4xx,"error"}`).
/// A body that fails changes nothing of the others.
pub async fn create_batch(
    State(state): State<Arc<AppState>>,
    Body(body): Body,
) -> Result<Json<serde_json::Value>, ApiError> {
    let batch: Batch = serde_json::from_slice(&body)
        .map_err(|e| ApiError::InvalidRequest(format!("a batch is {{\"runs\": [...]}}: {e}")))?;
    if batch.runs.is_empty() || batch.runs.len() > MAX_BATCH {
        return Err(ApiError::InvalidRequest(format!(
            "a batch holds 1-{MAX_BATCH} runs, got {}",
            batch.runs.len()
        )));
    }
    // The bodies are enqueued at once: their Redis commands share the connection's pipeline and
    // their records the store writer's transactions, so a batch costs a few round trips, not a
    // few per run.
    let results = futures_util::future::join_all(batch.runs.iter().map(|run| async {
        let bytes = serde_json::to_vec(run).unwrap_or_default();
        match enqueue_one(&state, &bytes).await {
            Ok((run_id, deadline_s)) => serde_json::json!({
                "status": 202,
                "events_url": events_url(&state, &run_id, deadline_s),
                "run_id": run_id,
            }),
            Err(e) => serde_json::json!({
                "status": e.status().as_u16(),
                "error": { "code": e.code(), "message": e.to_string() },
            }),
        }
    }))
    .await;
    Ok(Json(serde_json::json!({ "results": results })))
}

/// `202 {"run_id","status":"queued","events_url"}` for a run with `deadline_s` to run in.
pub(super) fn accepted(state: &AppState, run_id: String, deadline_s: u64) -> Response {
    let events_url = events_url(state, &run_id, deadline_s);
    let body =
        serde_json::json!({ "run_id": run_id, "status": "queued", "events_url": events_url });
    (StatusCode::ACCEPTED, Json(body)).into_response()
}

/// Where the run's events are read: signed for this run alone until its events expire (a day
/// past its deadline) when the server has `FREEWAY_SECRET_KEY`, else needing the API token.
fn events_url(state: &AppState, run_id: &str, deadline_s: u64) -> String {
    let path = format!("/v1/runs/{run_id}/events");
    match &state.signer {
        Some(signer) => {
            let lasts_s = deadline_s + freeway::events::EVENTS_URL_GRACE_S;
            let expires_ms = freeway::clock::epoch_ms() + lasts_s * 1000;
            format!("{path}?token={}", signer.sign(run_id, expires_ms))
        }
        None => path,
    }
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
