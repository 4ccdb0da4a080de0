//! The rows of the store's tables as Rust values, and back: typed column reads that work on
//! either driver, the conversions every column needs (counts and times as BIGINT, enums as their
//! serde text, JSON as text, text cleaned of NUL), and the row form of each record.

use super::db::{db_error, now_ms, to_i64};
use crate::budget::Counters;
use crate::catalog::DEFAULT_TIER;
use crate::chat::{Message, ToolCall, Usage};
use crate::run::{ApprovalRecord, AttemptRecord, Decided, RunRecord, RunState};
use crate::store::StoreError;
use serde::Serialize;
use serde::de::DeserializeOwned;
use sqlx::Row;
use sqlx::postgres::PgRow;
use sqlx::sqlite::SqliteRow;

/// Typed reads of a row, whichever driver it came from.
pub(crate) trait Columns {
    fn text(&self, col: &str) -> Result<String, StoreError>;
    fn opt_text(&self, col: &str) -> Result<Option<String>, StoreError>;
    fn int(&self, col: &str) -> Result<i64, StoreError>;
    fn opt_int(&self, col: &str) -> Result<Option<i64>, StoreError>;
    fn float(&self, col: &str) -> Result<f64, StoreError>;
    fn opt_float(&self, col: &str) -> Result<Option<f64>, StoreError>;
}

macro_rules! columns_for {
    ($($row:ty),*) => {$(
        impl Columns for $row {
            fn text(&self, col: &str) -> Result<String, StoreError> {
                self.try_get(col).map_err(db_error)
            }
            fn opt_text(&self, col: &str) -> Result<Option<String>, StoreError> {
                self.try_get(col).map_err(db_error)
            }
            fn int(&self, col: &str) -> Result<i64, StoreError> {
                self.try_get(col).map_err(db_error)
            }
            fn opt_int(&self, col: &str) -> Result<Option<i64>, StoreError> {
                self.try_get(col).map_err(db_error)
            }
            fn float(&self, col: &str) -> Result<f64, StoreError> {
                self.try_get(col).map_err(db_error)
            }
            fn opt_float(&self, col: &str) -> Result<Option<f64>, StoreError> {
                self.try_get(col).map_err(db_error)
            }
        }
    )*};
}
columns_for!(SqliteRow, PgRow);

pub(super) fn from_i64<T: TryFrom<i64>>(v: i64, col: &str) -> Result<T, StoreError> {
    T::try_from(v).map_err(|_| StoreError::Corrupt(format!("{col} = {v} is out of range")))
}

pub(super) fn flag(v: i64, col: &str) -> Result<bool, StoreError> {
    match v {
        0 => Ok(false),
        1 => Ok(true),
        _ => Err(StoreError::Corrupt(format!("{col} = {v} is not 0 or 1"))),
    }
}

/// Text as both backends can store it: PostgreSQL refuses NUL in text, and a model's output or a
/// tool's result may carry one; it becomes U+FFFD on either backend, so they agree.
pub(super) fn clean(text: &str) -> String {
    text.replace('\0', "\u{FFFD}")
}

/// An enum as the text serde gives it (`succeeded`, `rate_limited`, `assistant`…).
pub(super) fn enum_text<T: Serialize>(v: &T, what: &str) -> Result<String, StoreError> {
    match serde_json::to_value(v) {
        Ok(serde_json::Value::String(s)) => Ok(s),
        _ => Err(StoreError::Invalid(format!("{what} has no text form"))),
    }
}

pub(super) fn enum_from<T: DeserializeOwned>(s: String, col: &str) -> Result<T, StoreError> {
    serde_json::from_value(serde_json::Value::String(s))
        .map_err(|e| StoreError::Corrupt(format!("{col}: {e}")))
}

pub(super) fn json_text<T: Serialize>(v: &T, what: &str) -> Result<String, StoreError> {
    serde_json::to_string(v).map_err(|e| StoreError::Invalid(format!("{what}: {e}")))
}

pub(super) fn json_from<T: DeserializeOwned>(s: &str, col: &str) -> Result<T, StoreError> {
    serde_json::from_str(s).map_err(|e| StoreError::Corrupt(format!("{col}: {e}")))
}

macro_rules! run_columns {
    () => {
        "run_id, user_id, conversation_id, kind, routes, parent_run_id, idempotency_key, status, code, \
         calls, step1_attempts, retried, steps, route_index, input_applied, ambiguous_stop, emitted, \
         snoozes, output, incomplete, prompt_tokens, completion_tokens, total_tokens, pending_tool_call, \
         summary, deadline_ms, created_ms, updated_ms, retry_of, tenant, tier, priority, max_usd, \
         cost_usd"
    };
}

/// The answer to an approval, as the `approvals` table holds it.
pub(crate) struct DecisionRow {
    pub run_id: String,
    pub tool_call_id: String,
    pub decision: &'static str,
    pub result: String,
    pub continuation_run_id: String,
    pub decided_ms: i64,
}

/// A message as the `messages` table holds it.
pub(crate) struct MessageRow {
    pub id: String,
    pub conversation_id: String,
    pub run_id: String,
    pub key: String,
    pub role: String,
    pub content: Option<String>,
    pub tool_calls: Option<String>,
    pub tool_call_id: Option<String>,
    pub turn_fields: Option<String>,
    pub now: i64,
}

/// An attempt as the `attempts` table holds it.
pub(crate) struct AttemptRow {
    /// `call` for a run's attempt, `canary` for a provider's canary.
    pub kind: &'static str,
    pub run_id: String,
    pub n: i64,
    pub step: i64,
    pub route: String,
    pub http_status: Option<i64>,
    pub error: Option<String>,
    pub verdict: Option<String>,
    pub retry_hint_ms: Option<i64>,
    pub ratelimit_remaining: Option<i64>,
    pub provider_name: Option<String>,
    pub latency_ms: i64,
    pub t_ms: i64,
    pub cost_usd: f64,
}

/// A [`RunRecord`] as the `runs` table holds it.
pub(crate) struct RunRow {
    pub(super) run_id: String,
    pub(super) user_id: String,
    pub(super) conversation_id: String,
    pub(super) kind: String,
    pub(super) routes: String,
    pub(super) parent_run_id: Option<String>,
    pub(super) idempotency_key: Option<String>,
    pub(super) status: String,
    pub(super) code: Option<String>,
    pub(super) calls: i64,
    pub(super) step1_attempts: i64,
    pub(super) retried: i64,
    pub(super) steps: i64,
    pub(super) route_index: Option<i64>,
    pub(super) input_applied: i64,
    pub(super) ambiguous_stop: i64,
    pub(super) emitted: i64,
    pub(super) snoozes: i64,
    pub(super) output: String,
    pub(super) incomplete: i64,
    pub(super) prompt_tokens: i64,
    pub(super) completion_tokens: i64,
    pub(super) total_tokens: i64,
    pub(super) pending_tool_call: Option<String>,
    pub(super) summary: Option<String>,
    pub(super) deadline_ms: i64,
    pub(super) created_ms: i64,
    pub(super) updated_ms: i64,
    pub(super) retry_of: Option<String>,
    /// NULL only in rows from before tenants (migration 9).
    pub(super) tenant: Option<String>,
    pub(super) tier: Option<String>,
    pub(super) priority: Option<String>,
    pub(super) max_usd: Option<f64>,
    pub(super) cost_usd: f64,
}

/// Bind a [`RunRow`] to 34 parameters, in the order of `run_columns!`.
macro_rules! bind_run {
    ($query:expr, $r:expr) => {
        $query
            .bind(&$r.run_id)
            .bind(&$r.user_id)
            .bind(&$r.conversation_id)
            .bind(&$r.kind)
            .bind(&$r.routes)
            .bind(&$r.parent_run_id)
            .bind(&$r.idempotency_key)
            .bind(&$r.status)
            .bind(&$r.code)
            .bind($r.calls)
            .bind($r.step1_attempts)
            .bind($r.retried)
            .bind($r.steps)
            .bind($r.route_index)
            .bind($r.input_applied)
            .bind($r.ambiguous_stop)
            .bind($r.emitted)
            .bind($r.snoozes)
            .bind(&$r.output)
            .bind($r.incomplete)
            .bind($r.prompt_tokens)
            .bind($r.completion_tokens)
            .bind($r.total_tokens)
            .bind(&$r.pending_tool_call)
            .bind(&$r.summary)
            .bind($r.deadline_ms)
            .bind($r.created_ms)
            .bind($r.updated_ms)
            .bind(&$r.retry_of)
            .bind(&$r.tenant)
            .bind(&$r.tier)
            .bind(&$r.priority)
            .bind($r.max_usd)
            .bind($r.cost_usd)
    };
}

impl RunRow {
    pub(super) fn from_record(r: &RunRecord) -> Result<RunRow, StoreError> {
        let s = &r.state;
        Ok(RunRow {
            run_id: r.run_id.clone(),
            user_id: r.user_id.clone(),
            conversation_id: r.conversation_id.clone(),
            kind: r.kind.as_str().to_string(),
            routes: json_text(&r.routes, "routes")?,
            parent_run_id: r.parent_run_id.clone(),
            idempotency_key: r.idempotency_key.clone(),
            status: r.status.as_str().to_string(),
            code: r.code.map(|c| c.as_str().to_string()),
            calls: i64::from(s.counters.calls),
            step1_attempts: i64::from(s.counters.step1_attempts),
            retried: i64::from(s.counters.retried),
            steps: i64::from(s.counters.steps),
            route_index: s
                .route_index
                .map(|i| to_i64(i, "route_index"))
                .transpose()?,
            input_applied: i64::from(s.input_applied),
            ambiguous_stop: i64::from(s.ambiguous_stop),
            emitted: i64::from(s.emitted),
            snoozes: i64::from(s.snoozes),
            output: clean(&r.output),
            incomplete: i64::from(r.incomplete),
            prompt_tokens: to_i64(r.usage.prompt_tokens, "prompt_tokens")?,
            completion_tokens: to_i64(r.usage.completion_tokens, "completion_tokens")?,
            total_tokens: to_i64(r.usage.total_tokens, "total_tokens")?,
            pending_tool_call: r
                .pending_tool_call
                .as_ref()
                .map(|c| json_text(c, "pending_tool_call"))
                .transpose()?,
            summary: r.summary.as_deref().map(clean),
            deadline_ms: to_i64(r.deadline_ms, "deadline_ms")?,
            created_ms: to_i64(r.created_ms, "created_ms")?,
            updated_ms: to_i64(r.updated_ms, "updated_ms")?,
            retry_of: r.retry_of.clone(),
            tenant: Some(r.tenant.clone()),
            tier: Some(r.tier.clone()),
            priority: Some(r.priority.as_str().to_string()),
            max_usd: r.max_usd,
            cost_usd: r.cost_usd,
        })
    }

    pub(super) fn read(row: &impl Columns) -> Result<RunRow, StoreError> {
        Ok(RunRow {
            run_id: row.text("run_id")?,
            user_id: row.text("user_id")?,
            conversation_id: row.text("conversation_id")?,
            kind: row.text("kind")?,
            routes: row.text("routes")?,
            parent_run_id: row.opt_text("parent_run_id")?,
            idempotency_key: row.opt_text("idempotency_key")?,
            status: row.text("status")?,
            code: row.opt_text("code")?,
            calls: row.int("calls")?,
            step1_attempts: row.int("step1_attempts")?,
            retried: row.int("retried")?,
            steps: row.int("steps")?,
            route_index: row.opt_int("route_index")?,
            input_applied: row.int("input_applied")?,
            ambiguous_stop: row.int("ambiguous_stop")?,
            emitted: row.int("emitted")?,
            snoozes: row.int("snoozes")?,
            output: row.text("output")?,
            incomplete: row.int("incomplete")?,
            prompt_tokens: row.int("prompt_tokens")?,
            completion_tokens: row.int("completion_tokens")?,
            total_tokens: row.int("total_tokens")?,
            pending_tool_call: row.opt_text("pending_tool_call")?,
            summary: row.opt_text("summary")?,
            deadline_ms: row.int("deadline_ms")?,
            created_ms: row.int("created_ms")?,
            updated_ms: row.int("updated_ms")?,
            retry_of: row.opt_text("retry_of")?,
            tenant: row.opt_text("tenant")?,
            tier: row.opt_text("tier")?,
            priority: row.opt_text("priority")?,
            max_usd: row.opt_float("max_usd")?,
            cost_usd: row.float("cost_usd")?,
        })
    }

    pub(super) fn into_record(self) -> Result<RunRecord, StoreError> {
        Ok(RunRecord {
            kind: enum_from(self.kind, "kind")?,
            routes: json_from(&self.routes, "routes")?,
            parent_run_id: self.parent_run_id,
            retry_of: self.retry_of,
            idempotency_key: self.idempotency_key,
            status: enum_from(self.status, "status")?,
            code: self.code.map(|c| enum_from(c, "code")).transpose()?,
            state: RunState {
                counters: Counters {
                    calls: from_i64(self.calls, "calls")?,
                    step1_attempts: from_i64(self.step1_attempts, "step1_attempts")?,
                    retried: flag(self.retried, "retried")?,
                    steps: from_i64(self.steps, "steps")?,
                },
                route_index: self
                    .route_index
                    .map(|i| from_i64(i, "route_index"))
                    .transpose()?,
                input_applied: flag(self.input_applied, "input_applied")?,
                ambiguous_stop: flag(self.ambiguous_stop, "ambiguous_stop")?,
                emitted: flag(self.emitted, "emitted")?,
                snoozes: from_i64(self.snoozes, "snoozes")?,
            },
            output: self.output,
            incomplete: flag(self.incomplete, "incomplete")?,
            usage: Usage {
                prompt_tokens: from_i64(self.prompt_tokens, "prompt_tokens")?,
                completion_tokens: from_i64(self.completion_tokens, "completion_tokens")?,
                total_tokens: from_i64(self.total_tokens, "total_tokens")?,
            },
            pending_tool_call: self
                .pending_tool_call
                .map(|c| json_from(&c, "pending_tool_call"))
                .transpose()?,
            summary: self.summary,
            created_ms: from_i64(self.created_ms, "created_ms")?,
            updated_ms: from_i64(self.updated_ms, "updated_ms")?,
            deadline_ms: from_i64(self.deadline_ms, "deadline_ms")?,
            tenant: self.tenant.unwrap_or_else(|| self.user_id.clone()),
            tier: self.tier.unwrap_or_else(|| DEFAULT_TIER.to_string()),
            priority: self
                .priority
                .map(|p| enum_from(p, "priority"))
                .transpose()?
                .unwrap_or_default(),
            max_usd: self.max_usd,
            cost_usd: self.cost_usd,
            run_id: self.run_id,
            user_id: self.user_id,
            conversation_id: self.conversation_id,
        })
    }
}

pub(super) fn message_from(row: &impl Columns) -> Result<Message, StoreError> {
    Ok(Message {
        role: enum_from(row.text("role")?, "role")?,
        content: row.opt_text("content")?,
        tool_calls: match row.opt_text("tool_calls")? {
            Some(calls) => json_from::<Vec<ToolCall>>(&calls, "tool_calls")?,
            None => Vec::new(),
        },
        tool_call_id: row.opt_text("tool_call_id")?,
        turn_fields: match row.opt_text("turn_fields")? {
            Some(fields) => json_from(&fields, "turn_fields")?,
            None => serde_json::Map::new(),
        },
    })
}

pub(super) fn attempt_from(row: &impl Columns) -> Result<AttemptRecord, StoreError> {
    Ok(AttemptRecord {
        run_id: row.text("run_id")?,
        n: from_i64(row.int("n")?, "n")?,
        step: from_i64(row.int("step")?, "step")?,
        route: row.text("route")?,
        http_status: row
            .opt_int("http_status")?
            .map(|s| from_i64(s, "http_status"))
            .transpose()?,
        error: row.opt_text("error")?,
        verdict: row
            .opt_text("verdict")?
            .map(|v| enum_from(v, "verdict"))
            .transpose()?,
        retry_hint_ms: row
            .opt_int("retry_hint_ms")?
            .map(|v| from_i64(v, "retry_hint_ms"))
            .transpose()?,
        ratelimit_remaining: row.opt_int("ratelimit_remaining")?,
        provider_name: row.opt_text("provider_name")?,
        latency_ms: from_i64(row.int("latency_ms")?, "latency_ms")?,
        t_ms: from_i64(row.int("t_ms")?, "t_ms")?,
        cost_usd: row.float("cost_usd")?,
    })
}

pub(super) fn message_row(
    conversation_id: &str,
    run_id: &str,
    key: &str,
    message: &Message,
) -> Result<MessageRow, StoreError> {
    Ok(MessageRow {
        id: ulid::Ulid::generate().to_string(),
        conversation_id: conversation_id.to_string(),
        run_id: run_id.to_string(),
        key: key.to_string(),
        role: enum_text(&message.role, "role")?,
        content: message.content.as_deref().map(clean),
        tool_calls: match message.tool_calls.is_empty() {
            true => None,
            false => Some(json_text(&message.tool_calls, "tool_calls")?),
        },
        tool_call_id: message.tool_call_id.as_deref().map(clean),
        turn_fields: match message.turn_fields.is_empty() {
            true => None,
            false => Some(json_text(&message.turn_fields, "turn_fields")?),
        },
        now: now_ms()?,
    })
}

pub(super) fn attempt_row(a: &AttemptRecord) -> Result<AttemptRow, StoreError> {
    Ok(AttemptRow {
        kind: "call",
        run_id: a.run_id.clone(),
        n: i64::from(a.n),
        step: i64::from(a.step),
        route: clean(&a.route),
        http_status: a.http_status.map(i64::from),
        error: a.error.as_deref().map(clean),
        verdict: a.verdict.map(|v| v.as_str().to_string()),
        retry_hint_ms: a
            .retry_hint_ms
            .map(|v| to_i64(v, "retry_hint_ms"))
            .transpose()?,
        ratelimit_remaining: a.ratelimit_remaining,
        provider_name: a.provider_name.as_deref().map(clean),
        latency_ms: to_i64(a.latency_ms, "latency_ms")?,
        t_ms: to_i64(a.t_ms, "t_ms")?,
        cost_usd: a.cost_usd,
    })
}

pub(super) fn decision_row(
    run_id: &str,
    tool_call_id: &str,
    d: &Decided,
) -> Result<DecisionRow, StoreError> {
    Ok(DecisionRow {
        run_id: run_id.to_string(),
        tool_call_id: tool_call_id.to_string(),
        decision: d.decision.as_str(),
        result: clean(&d.result),
        continuation_run_id: d.continuation_run_id.clone(),
        decided_ms: to_i64(d.decided_ms, "decided_ms")?,
    })
}

pub(super) fn approval_from(row: &impl Columns) -> Result<ApprovalRecord, StoreError> {
    let decided = match row.opt_text("decision")? {
        None => None,
        Some(decision) => Some(Decided {
            decision: enum_from(decision, "decision")?,
            result: row.opt_text("result")?.unwrap_or_default(),
            continuation_run_id: row.opt_text("continuation_run_id")?.unwrap_or_default(),
            decided_ms: from_i64(row.opt_int("decided_ms")?.unwrap_or_default(), "decided_ms")?,
        }),
    };
    Ok(ApprovalRecord {
        run_id: row.text("run_id")?,
        tool_call: json_from(&row.text("tool_call")?, "tool_call")?,
        created_ms: from_i64(row.int("created_ms")?, "created_ms")?,
        decided,
    })
}
