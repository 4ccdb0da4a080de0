//! The job board (docs/api.md §1 `GET /board`): one self-contained page for people, and
//! the small JSON endpoints under `/v1/board/` it polls.
//!
//! apalis-board 1.0.0 is not used: on Redis half of its endpoints fail or show zeros (see
//! docs/operations.md), and its view is apalis's tasks, not freeway's runs, rests
//! and attempt logs. This board reads our own data: queue depths and workers from apalis's Redis
//! keys, rests from [`freeway::rest::Rests::list`], runs from the store, events from the runs'
//! streams, pools with their waiting runs and fair shares from `/v1/pools`, and spend by tenant
//! from `/v1/tenants` ([`super::tenants`]).
//!
//! The page itself holds no data and is served without a token; everything it shows comes from
//! `/v1`, behind the bearer token. It asks for the token in a small form and keeps it in the
//! tab's `sessionStorage` (gone when the tab closes, never in a cookie, so there is nothing for a
//! cross-site request to ride on), sending it as `Authorization: Bearer`. It polls (once a second)
//! rather than holding an SSE stream, since `EventSource` cannot send that header. A strict CSP
//! with a per-response nonce lets only the page's own inline script run, and the script writes
//! data into the page as text, never as HTML.

use super::auth::presents_admin;
use super::error::{ApiError, PathParams};
use super::pools::CanaryView;
use super::state::AppState;
use super::totals::Totals;
use super::user::ForUser;
use crate::view::RunView;
use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use freeway::chat::Message;
use freeway::events::Event;
use freeway::rest::Rests;
use freeway::store::Store;
use queue::schedule::{Depths, HEARTBEAT, MISSED_HEARTBEATS, Replica};
use serde::Serialize;
use std::sync::Arc;

const PAGE: &str = include_str!("board.html");
/// Replaced in [`PAGE`] by each response's CSP nonce.
const NONCE_SLOT: &str = "__CSP_NONCE__";
/// Runs the list shows when the page does not say.
/// The newest events and messages a run's detail shows: enough to read, bounded per poll.
const MAX_EVENTS: usize = 500;
const MAX_MESSAGES: usize = 200;
/// The most workers listed: apalis keeps a gracefully stopped worker until an orphan sweep.
const MAX_WORKERS: usize = 200;
/// The most of a run's input the detail shows.
const MAX_INPUT_SHOWN: usize = 4_096;

/// `GET /board`: the page, with a fresh CSP nonce.
#[utoipa::path(
    get, operation_id = "boardPage", path = "/board", tag = "board",
    responses((status = 200, description = "The job board", content_type = "text/html", body = String))
)]
pub async fn page() -> Response {
    let nonce = ulid::Ulid::generate().to_string();
    let csp = format!(
        "default-src 'none'; script-src 'nonce-{nonce}'; style-src 'nonce-{nonce}'; \
         connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; \
         frame-ancestors 'none'"
    );
    let mut response = PAGE.replace(NONCE_SLOT, &nonce).into_response();
    let headers = response.headers_mut();
    for (name, value) in [
        (header::CONTENT_TYPE, "text/html; charset=utf-8"),
        (header::CACHE_CONTROL, "no-store"),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::REFERRER_POLICY, "no-referrer"),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    if let Ok(value) = HeaderValue::from_str(&csp) {
        headers.insert(header::CONTENT_SECURITY_POLICY, value);
    }
    response
}

/// A worker replica as apalis registered it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Worker {
    pub name: String,
    pub last_heartbeat_ms: u64,
    pub age_ms: u64,
    /// Jobs it has claimed and not finished (its whole claimed batch).
    pub running: u64,
    /// No heartbeat for longer than a crashed replica is given: its jobs go to another replica
    /// at the next orphan sweep. A replica that stopped gracefully also shows as stale until
    /// then (apalis 1.0 does not deregister it).
    pub stale: bool,
}

/// The replicas as the board shows them at `now_ms`: which ones missed their heartbeats.
pub fn workers(replicas: Vec<Replica>, now_ms: u64) -> Vec<Worker> {
    let stale_after = (HEARTBEAT * (MISSED_HEARTBEATS as u32 + 1)).as_millis() as u64;
    replicas
        .into_iter()
        .map(|r| {
            let age_ms = now_ms.saturating_sub(r.heartbeat_ms);
            Worker {
                name: r.name,
                last_heartbeat_ms: r.heartbeat_ms,
                age_ms,
                running: r.running,
                stale: age_ms > stale_after,
            }
        })
        .collect()
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct Overview {
    now_ms: u64,
    namespace: String,
    /// What the presented token may do: the page says whether the clear button will work.
    viewer: Viewer,
    depths: Depths,
    workers: Vec<Worker>,
    /// The first page of the active rests (`GET /v1/rests` has the others).
    rests: super::rests::RestList,
    /// Each provider's newest canary.
    canaries: Vec<ProviderCanary>,
}

#[derive(Serialize, utoipa::ToSchema)]
struct ProviderCanary {
    provider: String,
    #[serde(flatten)]
    canary: CanaryView,
}

#[derive(Serialize, utoipa::ToSchema)]
struct Viewer {
    admin: bool,
    /// Whether an admin token is configured at all (without one nobody can clear).
    clear_enabled: bool,
}

/// `GET /v1/board/overview`: depths, workers, rests and canaries in one poll.
#[utoipa::path(
    get, operation_id = "boardOverview", path = "/v1/board/overview", tag = "board",
    responses((status = 200, description = "Depths, workers, rests and canaries", body = Overview))
)]
pub async fn overview(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
) -> Result<Json<Overview>, ApiError> {
    let now_ms = freeway::clock::epoch_ms();
    let (depths, mut replicas) = state.enqueuer.queue().snapshot().await?;
    replicas.truncate(MAX_WORKERS);
    let listed = state.fleet.rests().list().await?;
    let rests = super::rests::RestList::page(listed, None, super::rests::REST_PAGE);
    let canaries = state.store.last_canaries().await?;
    Ok(Json(Overview {
        now_ms,
        namespace: state.fleet.namespace().to_string(),
        viewer: Viewer {
            admin: presents_admin(&state.tokens, &headers),
            clear_enabled: state.tokens.admin.is_some(),
        },
        depths,
        workers: workers(replicas, now_ms),
        rests,
        canaries: canaries
            .into_iter()
            .map(|c| ProviderCanary {
                provider: c.provider.clone(),
                canary: c.into(),
            })
            .collect(),
    }))
}

/// One entry of a run's event stream.
#[derive(Serialize, utoipa::ToSchema)]
struct EventLine {
    id: String,
    #[serde(rename = "type")]
    kind: &'static str,
    data: Event,
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct Detail {
    run: RunView,
    /// The newest [`MAX_EVENTS`] events, oldest first; empty once the stream expired (a day
    /// after the run ended).
    events: Vec<EventLine>,
    /// The conversation's last [`MAX_MESSAGES`] messages (the run's turns and those before it).
    transcript: Vec<Message>,
    transcript_total: usize,
    /// The input the run was asked (its kept job's), cut to [`MAX_INPUT_SHOWN`]: a queued or
    /// delayed run has no message in its conversation yet.
    input: Option<String>,
    /// The runs that retry this one, oldest first.
    retried_as: Vec<String>,
}

/// `GET /v1/board/runs/{id}`: the run with its attempt log, events and transcript.
#[utoipa::path(
    get, operation_id = "boardRun", path = "/v1/board/runs/{id}", tag = "board",
    params(("id" = String, Path, description = "The run id"), crate::api::user::UserQuery),
    responses((status = 200, description = "The run with its events and transcript", body = Detail), (status = 404, description = "No such run", body = crate::api::error::ErrorBody))
)]
pub async fn run_detail(
    State(state): State<Arc<AppState>>,
    PathParams(id): PathParams<String>,
    user: ForUser,
) -> Result<Json<Detail>, ApiError> {
    let run = RunView::load(&state.store, &id)
        .await?
        .filter(|r| user.sees(&r.user_id))
        .ok_or_else(|| super::user::not_found(&id))?;
    let mut conn = state.fleet.connection();
    let key = freeway::events::stream_key(state.fleet.namespace(), &id);
    let events = crate::stream::latest(&mut conn, &key, MAX_EVENTS)
        .await?
        .into_iter()
        .filter_map(|entry| {
            let event = entry.stored.event?;
            Some(EventLine {
                id: entry.id.to_string(),
                kind: event.kind(),
                data: event,
            })
        })
        .collect();
    let mut transcript = state.store.transcript(&run.conversation_id).await?;
    let transcript_total = transcript.len();
    transcript.drain(..transcript_total.saturating_sub(MAX_MESSAGES));
    let input = state
        .store
        .job(&id)
        .await?
        .and_then(|text| serde_json::from_str::<freeway::job::RunJob>(&text).ok())
        .and_then(|job| job.request.input)
        .map(|input| freeway::text::cut(&input, MAX_INPUT_SHOWN));
    let retried_as = state.store.retried_as(&id).await?;
    Ok(Json(Detail {
        run,
        events,
        transcript,
        transcript_total,
        input,
        retried_as,
    }))
}

/// `GET /v1/board/totals`: the runs that ended in the last 24 hours, by outcome, ten minutes at
/// a time.
#[utoipa::path(
    get, operation_id = "boardTotals", path = "/v1/board/totals", tag = "board",
    responses((status = 200, description = "Runs ended in the last 24 hours by outcome", body = Totals))
)]
pub async fn totals(State(state): State<Arc<AppState>>) -> Result<Json<Totals>, ApiError> {
    Ok(Json(state.totals.read(&state.store).await?))
}
