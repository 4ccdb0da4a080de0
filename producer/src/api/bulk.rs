//! `POST /v1/runs:bulk`: retry or cancel every run a filter matches, as one operator action
//! (admin token). A dry run counts what it would act on; the real one must name that count
//! (`expect`), so the operator confirms a number, and a filter that has since matched more or
//! fewer runs is answered `409` with the new count rather than acted on.
//!
//! Acting is the single-run action for each run ([`queue::Enqueuer::retry`], `cancel`): a
//! retried run is enqueued like any other, so it waits its turn in its pool's limiter, and
//! 1,000 retries spend no call faster than 1,000 runs enqueued by a web app would.

use super::audit;
use super::auth::require_admin;
use super::error::{ApiError, JsonBody};
use super::run_list::{ListQuery, run_filter};
use super::state::AppState;
use axum::Json;
use axum::extract::State;
use axum::http::HeaderMap;
use freeway::run::RunStatus;
use freeway::store::{MAX_PAGE, RunFilter, Store};
use futures_util::StreamExt;
use queue::Cancelled;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// The most runs one bulk action acts on: a wider filter is refused, to be narrowed.
pub const MAX_BULK: u64 = 10_000;
/// Runs acted on at once.
const BULK_CONCURRENCY: usize = 16;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum BulkAction {
    Retry,
    Cancel,
}

impl BulkAction {
    /// The statuses the action applies to; runs of other statuses are not counted.
    fn statuses(self) -> &'static [RunStatus] {
        match self {
            BulkAction::Retry => &[RunStatus::Failed, RunStatus::Refused, RunStatus::Cancelled],
            BulkAction::Cancel => &[
                RunStatus::Queued,
                RunStatus::Delayed,
                RunStatus::Running,
                RunStatus::AwaitingApproval,
            ],
        }
    }

    fn name(self) -> &'static str {
        match self {
            BulkAction::Retry => "retry",
            BulkAction::Cancel => "cancel",
        }
    }
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BulkRequest {
    action: BulkAction,
    /// The fields of `GET /v1/runs` (no cursor, no limit).
    #[serde(default)]
    filter: Option<ListQuery>,
    /// Count, act on nothing.
    #[serde(default)]
    dry_run: bool,
    /// The count a dry run answered: the action goes ahead only if the filter still matches it.
    expect: Option<u64>,
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct BulkAnswer {
    action: BulkAction,
    dry_run: bool,
    /// Runs the filter matches that the action applies to.
    matched: u64,
    /// Runs acted on: retried, or cancelled by this action.
    done: u64,
    /// Cancel: runs that were running when cancelled and still are: each stops before its next
    /// call (or ends on its own, when the call it is in is its last).
    stopping: u64,
    /// Cancel: runs that were running when cancelled and have since ended another way
    /// (succeeded or failed in the call they were in), while the action went on.
    ended: u64,
    /// Runs left as they were: moved on since they were counted (finished, cancelled by someone
    /// else), or whose request is no longer kept; the message says why for the first.
    skipped: u64,
    message: String,
}

#[utoipa::path(
    post, operation_id = "bulkAction", path = "/v1/runs:bulk", tag = "operations",
    request_body = BulkRequest,
    responses((status = 200, description = "What the action did, or would do", body = BulkAnswer),
        (status = 409, description = "The filter no longer matches the count expected", body = crate::api::error::ErrorBody))
)]
pub async fn bulk(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    JsonBody(request): JsonBody<BulkRequest>,
) -> Result<Json<BulkAnswer>, ApiError> {
    require_admin(&state.tokens, &headers)?;
    let action = request.action;
    let (filter, cursor, _) = run_filter(request.filter.unwrap_or_default())?;
    if cursor.is_some() {
        return Err(ApiError::InvalidRequest(
            "filter: a bulk action takes every page; leave cursor out".into(),
        ));
    }
    let statuses: Vec<RunStatus> = match filter.status {
        Some(s) if action.statuses().contains(&s) => vec![s],
        Some(s) => {
            return Err(ApiError::InvalidRequest(format!(
                "{} applies to runs that are {}; not {}",
                action.name(),
                names(action.statuses()),
                s.as_str()
            )));
        }
        None => action.statuses().to_vec(),
    };
    let counts = state.store.count_runs(&filter).await?;
    let matched: u64 = counts
        .iter()
        .filter(|(s, _)| statuses.contains(s))
        .map(|(_, n)| n)
        .sum();
    if matched > MAX_BULK {
        return Err(ApiError::InvalidRequest(format!(
            "the filter matches {matched} runs; a bulk action takes at most {MAX_BULK}: narrow it"
        )));
    }
    if request.dry_run {
        let message = format!(
            "{matched} runs ({}) would be {}",
            names(&statuses),
            past(action)
        );
        return Ok(Json(BulkAnswer {
            action,
            dry_run: true,
            matched,
            done: 0,
            stopping: 0,
            ended: 0,
            skipped: 0,
            message,
        }));
    }
    match request.expect {
        Some(n) if n == matched => {}
        Some(n) => {
            return Err(ApiError::Conflict(format!(
                "the filter now matches {matched} runs, not {n}: confirm the new count"
            )));
        }
        None => {
            return Err(ApiError::InvalidRequest(
                "expect: the count of a dry run, to confirm it (or dry_run: true)".into(),
            ));
        }
    }
    let ids = matching(&state, &filter, &statuses).await?;
    let by = format!("{} (bulk)", audit::ADMIN);
    // Each action answers the run it left running (cancelled, to stop before its next call).
    let act = |id: String| {
        let (state, by) = (&state, &by);
        async move {
            match action {
                BulkAction::Retry => state.enqueuer.retry(&id, None).await.map(|_| None),
                BulkAction::Cancel => match state.enqueuer.cancel(&id, None, by).await? {
                    Cancelled::Now => Ok(None),
                    Cancelled::BeforeNextCall => Ok(Some(id)),
                },
            }
        }
    };
    // A few at once: each is a handful of Redis and store round trips, and 10,000 one after
    // the other would outlast a client's patience. The calls they lead to are paced all the same.
    let mut acted = futures_util::stream::iter(ids)
        .map(act)
        .buffer_unordered(BULK_CONCURRENCY);
    let (mut done, mut skipped) = (0, 0);
    let mut running = Vec::new();
    let mut why_skipped = None;
    let mut failure = None;
    while let Some(result) = acted.next().await {
        match result {
            Ok(None) => done += 1,
            Ok(Some(id)) => running.push(id),
            // A run that moved on since it was counted, or cannot be retried (its request is
            // gone), is left as it is; the others go ahead.
            Err(queue::enqueue::EnqueueError::Conflict(why)) => {
                skipped += 1;
                why_skipped.get_or_insert(why);
            }
            // Redis or the store failed: stop, and keep what was done in the audit trail.
            Err(e) => {
                failure = Some(e);
                break;
            }
        }
    }
    drop(acted);
    let target = describe(&filter, &statuses);
    let name = format!("bulk_{}", action.name());
    if let Some(e) = failure {
        let detail = format!("stopped after {} runs: {e}", done + running.len() as u64);
        audit::record(&state, audit::ADMIN, &name, &target, &detail).await;
        return Err(e.into());
    }
    let settled = settled_since(&state, running).await?;
    done += settled.cancelled;
    let (stopping, ended) = (settled.stopping, settled.ended);
    let message = match action {
        BulkAction::Retry => format!(
            "{done} runs retried as new runs; each waits its turn in its pool's limiter, so they call no faster than the pools allow{}",
            skipped_note(skipped, why_skipped.as_deref())
        ),
        BulkAction::Cancel => format!(
            "{done} runs cancelled; {stopping} running ones stop before their next call; {ended} ended another way while this ran{}",
            skipped_note(skipped, why_skipped.as_deref())
        ),
    };
    audit::record(&state, audit::ADMIN, &name, &target, &message).await;
    Ok(Json(BulkAnswer {
        action,
        dry_run: false,
        matched,
        done,
        stopping,
        ended,
        skipped,
        message,
    }))
}

/// Where the runs a cancel found running stand once it is over.
#[derive(Default)]
struct Settled {
    /// Their executors stopped them: cancelled.
    cancelled: u64,
    /// Still running: they stop before their next call.
    stopping: u64,
    /// They ended another way (the call they were in was their last).
    ended: u64,
}

/// Read back the runs a cancel found running: a run cancelled mid-call may finish that call and
/// end on its own, and the answer says so rather than count it cancelled.
async fn settled_since(state: &AppState, running: Vec<String>) -> Result<Settled, ApiError> {
    let mut read = futures_util::stream::iter(running)
        .map(|id| async move { state.store.run(&id).await })
        .buffer_unordered(BULK_CONCURRENCY);
    let mut settled = Settled::default();
    while let Some(run) = read.next().await {
        match run?.map(|r| r.status) {
            Some(RunStatus::Cancelled) => settled.cancelled += 1,
            Some(s) if s.is_final() => settled.ended += 1,
            _ => settled.stopping += 1,
        }
    }
    Ok(settled)
}

/// The ids of the runs of `statuses` that `filter` matches, newest first, page by page.
async fn matching(
    state: &AppState,
    filter: &RunFilter,
    statuses: &[RunStatus],
) -> Result<Vec<String>, ApiError> {
    let mut ids = Vec::new();
    for &status in statuses {
        let one = RunFilter {
            status: Some(status),
            ..filter.clone()
        };
        let mut after = None;
        loop {
            let page = state
                .store
                .list_runs(&one, after.as_ref(), MAX_PAGE)
                .await?;
            ids.extend(page.runs.into_iter().map(|r| r.run_id));
            if page.next.is_none() || ids.len() as u64 >= MAX_BULK {
                break;
            }
            after = page.next;
        }
    }
    ids.truncate(MAX_BULK as usize);
    Ok(ids)
}

fn names(statuses: &[RunStatus]) -> String {
    statuses
        .iter()
        .map(|s| s.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

fn past(action: BulkAction) -> &'static str {
    match action {
        BulkAction::Retry => "retried as new runs",
        BulkAction::Cancel => "cancelled",
    }
}

/// The runs left as they were, and why the first of them was.
fn skipped_note(skipped: u64, why: Option<&str>) -> String {
    match (skipped, why) {
        (0, _) => String::new(),
        (n, Some(why)) => format!("; {n} left as they are (the first: {why})"),
        (n, None) => format!("; {n} left as they are"),
    }
}

/// The filter, in the audit's words: `status in (failed) · code routes_exhausted · user u1`.
fn describe(filter: &RunFilter, statuses: &[RunStatus]) -> String {
    let mut parts = vec![format!("status in ({})", names(statuses))];
    let fields = [
        ("user", filter.user_id.as_deref()),
        ("tenant", filter.tenant.as_deref()),
        ("model", filter.model.as_deref()),
        ("code", filter.code.map(|c| c.as_str())),
        ("text", filter.q.as_deref()),
    ];
    parts.extend(
        fields
            .into_iter()
            .filter_map(|(k, v)| v.map(|v| format!("{k} {v}"))),
    );
    parts.join(" · ")
}
