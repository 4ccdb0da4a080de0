//! `GET /v1/runs`: the runs, newest first, filtered and paged by cursor, with counts per status
//! (docs/api.md). The board's runs tabs and search are this one endpoint.

use super::error::ApiError;
use super::state::AppState;
use axum::Json;
use axum::extract::{Query, State};
use freeway::job::is_id;
use freeway::run::{Code, RunRecord, RunStatus};
use freeway::store::{RunCursor, RunFilter, Store};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;

/// A page's runs unless `limit` says otherwise.
const DEFAULT_LIMIT: u32 = 50;
/// The longest `q` or `route` taken: a model id is at most 200 characters.
const MAX_TEXT: usize = 200;

#[derive(Deserialize, Default, utoipa::IntoParams, utoipa::ToSchema)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    user_id: Option<String>,
    tenant: Option<String>,
    status: Option<RunStatus>,
    /// A model one of the run's routes names.
    route: Option<String>,
    code: Option<Code>,
    q: Option<String>,
    cursor: Option<String>,
    limit: Option<u32>,
}

/// One line of the list: what a person scans for, without the output.
#[derive(Serialize, utoipa::ToSchema)]
struct RunLine {
    run_id: String,
    user_id: String,
    tenant: String,
    tier: String,
    priority: freeway::job::Priority,
    kind: freeway::budget::Kind,
    status: RunStatus,
    code: Option<Code>,
    calls: u32,
    snoozes: u32,
    /// `MODEL[@CONNECTION]`, in chain order.
    routes: Vec<String>,
    parent_run_id: Option<String>,
    retry_of: Option<String>,
    created_ms: u64,
    updated_ms: u64,
    deadline_ms: u64,
    max_usd: Option<f64>,
    cost_usd: f64,
}

impl From<RunRecord> for RunLine {
    fn from(r: RunRecord) -> RunLine {
        RunLine {
            calls: r.state.counters.calls,
            snoozes: r.state.snoozes,
            routes: r
                .routes
                .iter()
                .map(|s| match &s.connection {
                    Some(c) => format!("{}@{c}", s.model),
                    None => s.model.clone(),
                })
                .collect(),
            run_id: r.run_id,
            user_id: r.user_id,
            tenant: r.tenant,
            tier: r.tier,
            priority: r.priority,
            kind: r.kind,
            status: r.status,
            code: r.code,
            parent_run_id: r.parent_run_id,
            retry_of: r.retry_of,
            created_ms: r.created_ms,
            updated_ms: r.updated_ms,
            deadline_ms: r.deadline_ms,
            max_usd: r.max_usd,
            cost_usd: r.cost_usd,
        }
    }
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct RunList {
    runs: Vec<RunLine>,
    /// The `cursor` of the next page; `null` on the last.
    next_cursor: Option<String>,
    /// Runs matching the filter other than its status, by status (every status, zeros too).
    counts: BTreeMap<&'static str, u64>,
}

/// Check every field of the query; a field that is empty counts as not given.
pub fn run_filter(query: ListQuery) -> Result<(RunFilter, Option<RunCursor>, u32), ApiError> {
    let given = |v: Option<String>| v.filter(|s| !s.trim().is_empty());
    let bad = |m: &str| Err(ApiError::InvalidRequest(m.to_string()));
    let (user_id, tenant) = (given(query.user_id), given(query.tenant));
    if user_id.as_deref().is_some_and(|u| !is_id(u)) {
        return bad("user_id must match [A-Za-z0-9_.:-]{1,128}");
    }
    if tenant.as_deref().is_some_and(|t| !is_id(t)) {
        return bad("tenant must match [A-Za-z0-9_.:-]{1,128}");
    }
    let (model, q) = (given(query.route), given(query.q));
    if [&model, &q]
        .iter()
        .any(|t| t.as_ref().is_some_and(|t| t.len() > MAX_TEXT))
    {
        return bad("route and q are at most 200 characters");
    }
    let cursor = match given(query.cursor) {
        Some(text) => match RunCursor::decode(&text) {
            Some(c) => Some(c),
            None => return bad("cursor is not one this API handed out (use next_cursor)"),
        },
        None => None,
    };
    let limit = query.limit.unwrap_or(DEFAULT_LIMIT);
    if !(1..=freeway::store::MAX_PAGE).contains(&limit) {
        return bad("limit must be 1-200");
    }
    let filter = RunFilter {
        user_id,
        tenant,
        status: query.status,
        model,
        code: query.code,
        q,
    };
    Ok((filter, cursor, limit))
}

/// `GET /v1/runs?status=&user_id=&tenant=&route=&code=&q=&cursor=&limit=`.
#[utoipa::path(
    get, operation_id = "listRuns", path = "/v1/runs", tag = "runs",
    params(ListQuery),
    responses((status = 200, description = "Runs, newest first", body = RunList))
)]
pub async fn list(
    State(state): State<Arc<AppState>>,
    query: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<RunList>, ApiError> {
    let Query(query) = query.map_err(|r| ApiError::InvalidRequest(r.body_text()))?;
    let (filter, cursor, limit) = run_filter(query)?;
    let page = state
        .store
        .list_runs(&filter, cursor.as_ref(), limit)
        .await?;
    let mut counts: BTreeMap<&'static str, u64> =
        RunStatus::ALL.iter().map(|s| (s.as_str(), 0)).collect();
    for (status, n) in state.store.count_runs(&filter).await? {
        counts.insert(status.as_str(), n);
    }
    Ok(Json(RunList {
        runs: page.runs.into_iter().map(RunLine::from).collect(),
        next_cursor: page.next.map(|c| c.encode()),
        counts,
    }))
}
