//! A run as the web app and `producer status` see it (`GET /v1/runs/{id}`, docs/api.md §1): the
//! record, its attempt log, its pending approval and the approvals it was given in one JSON
//! object. Internal resume state
//! (route index, flags) stays out; the call count is the one counter people ask about.

use freeway::budget::Kind;
use freeway::chat::{ToolCall, Usage};
use freeway::job::Priority;
use freeway::route::RouteSpec;
use freeway::run::{ApprovalRecord, AttemptRecord, Code, RunStatus};
use freeway::store::{Store, StoreError};
use serde::Serialize;

#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct RunView {
    pub run_id: String,
    pub user_id: String,
    pub conversation_id: String,
    pub status: RunStatus,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code: Option<Code>,
    pub output: String,
    pub incomplete: bool,
    /// Provider calls made so far.
    pub calls: u32,
    pub attempts: Vec<AttemptRecord>,
    /// The tool call the run waits on, `null` when it waits on none.
    pub pending_approval: Option<ToolCall>,
    /// Every tool call the run paused on, with its answer once given.
    pub approvals: Vec<ApprovalRecord>,
    pub kind: Kind,
    pub routes: Vec<RouteSpec>,
    pub parent_run_id: Option<String>,
    /// The run this one retries.
    pub retry_of: Option<String>,
    pub created_ms: u64,
    pub updated_ms: u64,
    pub deadline_ms: u64,
    pub usage: Usage,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
    /// Whose share of shared pools the run takes: its `tenant`, else its user.
    pub tenant: String,
    pub tier: String,
    pub priority: Priority,
    /// The run's own spending cap, USD; `null` when it set none.
    pub max_usd: Option<f64>,
    /// What its attempts cost, USD.
    pub cost_usd: f64,
}

impl RunView {
    /// The run `run_id` from the store, `None` when there is no such run.
    pub async fn load(store: &dyn Store, run_id: &str) -> Result<Option<RunView>, StoreError> {
        let Some(r) = store.run(run_id).await? else {
            return Ok(None);
        };
        let attempts = store.attempts(run_id).await?;
        let approvals = store.approvals(run_id).await?;
        Ok(Some(RunView {
            calls: r.state.counters.calls,
            pending_approval: r
                .pending_tool_call
                .filter(|_| r.status == RunStatus::AwaitingApproval),
            run_id: r.run_id,
            user_id: r.user_id,
            conversation_id: r.conversation_id,
            status: r.status,
            code: r.code,
            output: r.output,
            incomplete: r.incomplete,
            attempts,
            approvals,
            kind: r.kind,
            routes: r.routes,
            parent_run_id: r.parent_run_id,
            retry_of: r.retry_of,
            created_ms: r.created_ms,
            updated_ms: r.updated_ms,
            deadline_ms: r.deadline_ms,
            usage: r.usage,
            summary: r.summary,
            tenant: r.tenant,
            tier: r.tier,
            priority: r.priority,
            max_usd: r.max_usd,
            cost_usd: r.cost_usd,
        }))
    }
}
