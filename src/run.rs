//! A run's record: its status, its code (docs/api.md §4), its resumable position and its attempt
//! log (docs/design.md §5). The engine reads and writes these through [`crate::store::Store`].

use crate::budget::{Counters, Kind};
use crate::chat::{ToolCall, Usage};
use crate::classify::Verdict;
use crate::job::{Priority, RunJob};
use crate::route::RouteSpec;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    Queued,
    Delayed,
    Running,
    AwaitingApproval,
    Succeeded,
    Failed,
    Refused,
    /// An operator or the web app cancelled it (`POST /v1/runs/{id}/cancel`).
    Cancelled,
}

impl RunStatus {
    /// Every status, in the order lists and counts show them.
    pub const ALL: [RunStatus; 8] = [
        RunStatus::Queued,
        RunStatus::Delayed,
        RunStatus::Running,
        RunStatus::AwaitingApproval,
        RunStatus::Succeeded,
        RunStatus::Failed,
        RunStatus::Refused,
        RunStatus::Cancelled,
    ];

    /// Whether a job for this run has nothing left to do (a redelivery is acknowledged and
    /// skipped).
    pub fn is_settled(self) -> bool {
        matches!(
            self,
            RunStatus::AwaitingApproval
                | RunStatus::Succeeded
                | RunStatus::Failed
                | RunStatus::Refused
                | RunStatus::Cancelled
        )
    }

    /// Whether the run is over for good: nothing can resume it (an approval resumes a run
    /// awaiting one).
    pub fn is_final(self) -> bool {
        self.is_settled() && self != RunStatus::AwaitingApproval
    }

    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Queued => "queued",
            RunStatus::Delayed => "delayed",
            RunStatus::Running => "running",
            RunStatus::AwaitingApproval => "awaiting_approval",
            RunStatus::Succeeded => "succeeded",
            RunStatus::Failed => "failed",
            RunStatus::Refused => "refused",
            RunStatus::Cancelled => "cancelled",
        }
    }
}

/// The codes of docs/api.md §4 that end a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Code {
    AccountResting,
    RoutesResting,
    DeadlineExceeded,
    RoutesExhausted,
    UpstreamError,
    RateLimited,
    Interrupted,
    PaymentRequired,
    AuthFailed,
    UpstreamRejected,
    BudgetExhausted,
    InvalidJob,
    /// Every route that was open had no key this run may use (a deleted connection, another
    /// user's, a provider without its key).
    ConnectionMissing,
    /// Only priced routes were left, and the run's or its tenant's spend cap would be passed
    /// (docs/design.md §4.8).
    SpendCapReached,
}

impl Code {
    pub fn as_str(self) -> &'static str {
        match self {
            Code::AccountResting => "account_resting",
            Code::RoutesResting => "routes_resting",
            Code::DeadlineExceeded => "deadline_exceeded",
            Code::RoutesExhausted => "routes_exhausted",
            Code::UpstreamError => "upstream_error",
            Code::RateLimited => "rate_limited",
            Code::Interrupted => "interrupted",
            Code::PaymentRequired => "payment_required",
            Code::AuthFailed => "auth_failed",
            Code::UpstreamRejected => "upstream_rejected",
            Code::BudgetExhausted => "budget_exhausted",
            Code::InvalidJob => "invalid_job",
            Code::ConnectionMissing => "connection_missing",
            Code::SpendCapReached => "spend_cap_reached",
        }
    }

    /// The code a failure ends a run with, by its verdict (docs/design.md §2.3).
    pub fn for_verdict(verdict: Verdict) -> Code {
        match verdict {
            Verdict::Account
            | Verdict::Route
            | Verdict::Provider
            | Verdict::Ambiguous
            | Verdict::BillingWait => Code::RateLimited,
            Verdict::Billing => Code::PaymentRequired,
            Verdict::Auth => Code::AuthFailed,
            Verdict::Client | Verdict::Gone => Code::UpstreamRejected,
            Verdict::Server => Code::UpstreamError,
        }
    }
}

/// Where a run stands: enough to resume it after a snooze or a crash.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunState {
    pub counters: Counters,
    /// The chain index the run settled on after step 1.
    pub route_index: Option<usize>,
    /// The run's input (user message, regenerate delete or continuation result) is in the
    /// transcript.
    pub input_applied: bool,
    /// This run met an ambiguous 402/429: it walks no more shared routes (docs/design.md §3 rule
    /// 4).
    pub ambiguous_stop: bool,
    /// Output was published (`delta`, `tool_call`, `tool_result`): no failover any more.
    pub emitted: bool,
    pub snoozes: u32,
}

/// A run as the store keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    pub run_id: String,
    pub user_id: String,
    pub conversation_id: String,
    pub kind: Kind,
    pub routes: Vec<RouteSpec>,
    pub parent_run_id: Option<String>,
    /// The run this one retries (`POST /v1/runs/{id}/retry`).
    #[serde(default)]
    pub retry_of: Option<String>,
    pub idempotency_key: Option<String>,
    pub status: RunStatus,
    pub code: Option<Code>,
    pub state: RunState,
    /// The assistant's final (or partial) text.
    pub output: String,
    /// The output stopped early and is incomplete.
    pub incomplete: bool,
    pub usage: Usage,
    pub pending_tool_call: Option<ToolCall>,
    pub summary: Option<String>,
    pub created_ms: u64,
    pub updated_ms: u64,
    pub deadline_ms: u64,
    /// (v3) Whose share the run takes ([`crate::job::RunRequest::tenant_id`]). A run stored
    /// before tenants existed reads as its user's.
    pub tenant: String,
    /// (v3) The tier it counts in; `default` for a run stored before tiers existed.
    pub tier: String,
    #[serde(default)]
    pub priority: Priority,
    /// The run's own spending cap, USD.
    #[serde(default)]
    pub max_usd: Option<f64>,
    /// What its attempts cost so far, USD: their sum (docs/design.md §4.8).
    #[serde(default)]
    pub cost_usd: f64,
}

impl RunRecord {
    /// The run's part is done once the tool call it paused on is answered: its continuation
    /// carries the conversation on. The one status change made outside the engine, so it lives
    /// with the record rather than with whoever answers.
    pub fn answered(&mut self, now_ms: u64) {
        self.pending_tool_call = None;
        self.status = RunStatus::Succeeded;
        self.updated_ms = now_ms;
    }

    /// The record of a run before anything happened to it: the producer stores it at enqueue; a
    /// worker that finds no record starts from it and stores it with its first save.
    pub fn queued(job: &RunJob, now_ms: u64) -> RunRecord {
        RunRecord {
            run_id: job.run_id.clone(),
            user_id: job.request.user_id.clone(),
            conversation_id: job.conversation_id.clone(),
            kind: job.request.kind,
            routes: job.request.routes.clone(),
            parent_run_id: job.continuation.as_ref().map(|c| c.parent_run_id.clone()),
            retry_of: job.retry_of.clone(),
            idempotency_key: job.request.idempotency_key.clone(),
            status: RunStatus::Queued,
            code: None,
            state: RunState::default(),
            output: String::new(),
            incomplete: false,
            usage: Usage::default(),
            pending_tool_call: None,
            summary: None,
            created_ms: now_ms,
            updated_ms: now_ms,
            deadline_ms: job.deadline_ms,
            tenant: job.request.tenant_id().to_string(),
            tier: job.request.tier_name().to_string(),
            priority: job.request.priority(),
            max_usd: job.request.max_usd,
            cost_usd: 0.0,
        }
    }
}

/// One provider call, failed or not: the fields that explain every failover after the fact.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AttemptRecord {
    pub run_id: String,
    /// 1-based over the whole run.
    pub n: u32,
    pub step: u32,
    pub route: String,
    /// The HTTP status, when the call got one.
    pub http_status: Option<u16>,
    /// The transport or in-band error, when there was one.
    pub error: Option<String>,
    /// `None` for a successful call.
    pub verdict: Option<Verdict>,
    pub retry_hint_ms: Option<u64>,
    pub ratelimit_remaining: Option<i64>,
    pub provider_name: Option<String>,
    pub latency_ms: u64,
    pub t_ms: u64,
    /// What the call cost in USD (docs/design.md §4.8): the provider's figure, or the
    /// configured price of the tokens it reported; 0 on a free route or a refusal.
    #[serde(default)]
    pub cost_usd: f64,
}

/// The error of an attempt whose outcome was never known.
pub const LOST: &str = "lost: the executor stopped before the call's outcome was known";

impl AttemptRecord {
    /// An attempt as it is counted, before its call: what the log keeps if its executor dies
    /// during the call (no status, no verdict, the error [`LOST`]).
    pub fn lost(run_id: &str, n: u32, step: u32, route: String, t_ms: u64) -> AttemptRecord {
        AttemptRecord {
            http_status: None,
            error: Some(LOST.to_string()),
            ..AttemptRecord::succeeded(run_id, n, step, route, t_ms)
        }
    }

    /// Whether this is an attempt whose outcome was never known.
    pub fn is_lost(&self) -> bool {
        self.verdict.is_none() && self.http_status.is_none() && self.error.as_deref() == Some(LOST)
    }

    /// A call that succeeded; a failure fills in its status, error and verdict.
    pub fn succeeded(run_id: &str, n: u32, step: u32, route: String, t_ms: u64) -> AttemptRecord {
        AttemptRecord {
            run_id: run_id.to_string(),
            n,
            step,
            route,
            http_status: Some(200),
            error: None,
            verdict: None,
            retry_hint_ms: None,
            ratelimit_remaining: None,
            provider_name: None,
            latency_ms: 0,
            t_ms,
            cost_usd: 0.0,
        }
    }
}

/// A person's answer to a tool call that needs approval (docs/design.md §2.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum Decision {
    Approve,
    Deny,
}

impl Decision {
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Approve => "approve",
            Decision::Deny => "deny",
        }
    }
}

/// How a paused tool call was answered, and the continuation that carries the answer on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Decided {
    pub decision: Decision,
    /// The tool result the model is given.
    pub result: String,
    pub continuation_run_id: String,
    pub decided_ms: u64,
}

/// A tool call a run paused on, and its answer once given: the audit of who let a tool run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ApprovalRecord {
    pub run_id: String,
    pub tool_call: ToolCall,
    pub created_ms: u64,
    /// `None` while the run still waits.
    pub decided: Option<Decided>,
}
