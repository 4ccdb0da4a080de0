//! `POST /v1/runs` (enqueue, through the same [`Enqueuer::enqueue`](queue::enqueue::Enqueuer)
//! as the CLI) and `GET /v1/runs/{id}` (scoped by `?user_id=`, see [`super::user`]).

use super::error::{ApiError, Body, ErrorDetail, PathParams};
use super::state::AppState;
use super::user::{ForUser, not_found};
use crate::view::RunView;
use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use freeway::job::{DEFAULT_DEADLINE_S, RunRequest};
use queue::enqueue::Outcome;
use std::sync::Arc;
use tracing::Instrument;

/// `202 {"run_id","status":"queued"}`, also for a repeated idempotency key; `429` while every
/// route rests and the run's `on_rest` is `refuse` (an interactive run's default).
#[utoipa::path(
    post, operation_id = "createRun", path = "/v1/runs", tag = "runs",
    request_body = freeway::job::RunRequest,
    params(("traceparent" = Option<String>, Header, description = "W3C trace context of the web request that enqueues the run")),
    responses(
        (status = 202, description = "Queued", body = Accepted),
        (status = 404, description = "a route's connection or provider is unknown, or the conversation", body = crate::api::error::ErrorBody),
        (status = 429, description = "Every route is closed and the run's `on_rest` is `refuse`: account_resting, routes_resting or spend_cap_reached; also too_many_requests", body = crate::api::error::ErrorBody),
    )
)]
pub async fn create(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Body(body): Body,
) -> Result<Response, ApiError> {
    let (run_id, deadline_s) = enqueue_one(&state, &body, traceparent(&headers)).await?;
    Ok(accepted(&state, run_id, deadline_s))
}

/// The request's W3C `traceparent` header; one that is not a traceparent is ignored, as the
/// standard asks (the body's field, which the web app writes itself, is refused instead).
fn traceparent(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get("traceparent")?.to_str().ok()?;
    freeway::telemetry::is_traceparent(value).then_some(value)
}

/// Validate and enqueue one run body, in the trace of its `traceparent` (the body's, else the
/// header's); its run id and deadline.
async fn enqueue_one(
    state: &AppState,
    body: &[u8],
    header_traceparent: Option<&str>,
) -> Result<(String, u64), ApiError> {
    let mut request = RunRequest::from_json(body, state.enqueuer.catalog())
        .map_err(|e| ApiError::InvalidRequest(e.to_string()))?;
    if request.traceparent.is_none() {
        request.traceparent = header_traceparent.map(str::to_string);
    }
    let deadline_s = request.deadline_s.unwrap_or(DEFAULT_DEADLINE_S);
    let span = tracing::info_span!("enqueue", user_id = %request.user_id);
    freeway::telemetry::continue_trace(&span, request.traceparent.as_deref());
    let outcome = state.enqueuer.enqueue(request).instrument(span).await?;
    Ok((enqueued(outcome)?, deadline_s))
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

/// A batch's body: each run is a body of `POST /v1/runs`, checked on its own.
#[derive(serde::Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Batch {
    #[schema(value_type = Vec<freeway::job::RunRequest>, min_items = 1, max_items = 1000)]
    runs: Vec<serde_json::Value>,
}

/// `202`: the run is queued (or was, under the same idempotency key).
#[derive(serde::Serialize, utoipa::ToSchema)]
pub struct Accepted {
    run_id: String,
    /// Always `queued`: what the run is now is in its events.
    #[schema(value_type = String, example = "queued")]
    status: &'static str,
    /// Where the run's events are read; signed for this run alone when the server has
    /// `FREEWAY_SECRET_KEY`, so a browser may open it without the API token.
    events_url: String,
}

/// What `POST /v1/runs` would have answered for one body of a batch.
#[derive(serde::Serialize, utoipa::ToSchema)]
pub struct BatchResult {
    /// `202`, or the error's HTTP status.
    status: u16,
    #[serde(skip_serializing_if = "Option::is_none")]
    run_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    events_url: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<ErrorDetail>,
}

#[derive(serde::Serialize, utoipa::ToSchema)]
pub struct BatchResults {
    /// One per body, in order.
    results: Vec<BatchResult>,
}

/// `POST /v1/runs:batch {"runs":[…]}`: `200 {"results":[…]}`, one per body in order: what
/// `POST /v1/runs` would have answered (`{"status":202,"run_id"}` or `{"status":4xx,"error"}`).
/// A body that fails changes nothing of the others.
#[utoipa::path(
    post, operation_id = "createRuns", path = "/v1/runs:batch", tag = "runs",
    request_body = Batch,
    responses((status = 200, description = "One result per body, in order", body = BatchResults))
)]
pub async fn create_batch(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Body(body): Body,
) -> Result<Json<BatchResults>, ApiError> {
    let header_traceparent = traceparent(&headers);
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
        match enqueue_one(&state, &bytes, header_traceparent).await {
            Ok((run_id, deadline_s)) => BatchResult {
                status: StatusCode::ACCEPTED.as_u16(),
                events_url: Some(events_url(&state, &run_id, deadline_s)),
                run_id: Some(run_id),
                error: None,
            },
            Err(e) => BatchResult {
                status: e.status().as_u16(),
                run_id: None,
                events_url: None,
                error: Some(e.detail()),
            },
        }
    }))
    .await;
    Ok(Json(BatchResults { results }))
}

/// `202 {"run_id","status":"queued","events_url"}` for a run with `deadline_s` to run in.
pub(super) fn accepted(state: &AppState, run_id: String, deadline_s: u64) -> Response {
    let body = Accepted {
        events_url: events_url(state, &run_id, deadline_s),
        run_id,
        status: "queued",
    };
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

#[utoipa::path(
    get, operation_id = "getRun", path = "/v1/runs/{id}", tag = "runs",
    params(("id" = String, Path, description = "The run id"), crate::api::user::UserQuery),
    responses((status = 200, description = "The run", body = crate::view::RunView), (status = 404, description = "No such run (or not the user's)", body = crate::api::error::ErrorBody))
)]
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
