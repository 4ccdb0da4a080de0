//! An in-process [`Store`]: everything in maps behind one lock, for tests and benchmarks that
//! need the engine without a database. It keeps the SQL store's contract, not its durability.

use super::audit::{AuditEntry, AuditLog};
use super::usage::{check_usage_args, day_of, sort_tenants, sort_usage};
use super::{
    ConnectionInfo, Created, EndedCount, MAX_PAGE, RouteDay, RunCursor, RunFilter, RunPage,
    StatusCount, Store, StoreError, TenantSeen, Transition, UnsettledCursor, UnsettledJob,
    idem_key, key_of, newest_per_provider, sort_counts,
};
use crate::canary::CanaryRecord;
use crate::chat::{Message, Role};
use crate::job::RunJob;
use crate::run::{ApprovalRecord, AttemptRecord, Decided, RunRecord, RunStatus};
use async_trait::async_trait;
use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

#[derive(Debug, Default)]
pub struct MemoryStore {
    inner: Mutex<Memory>,
}

#[derive(Debug, Default)]
struct Memory {
    runs: HashMap<String, RunRecord>,
    conversations: HashMap<String, Vec<Message>>,
    appended: HashSet<(String, String)>,
    attempts: HashMap<String, Vec<AttemptRecord>>,
    approvals: HashMap<String, Vec<ApprovalRecord>>,
    owners: HashMap<String, String>,
    jobs: HashMap<String, String>,
    /// Idempotency keys (`<user_id>/<key>`) and the run each names.
    keys: HashMap<String, String>,
    canaries: Vec<AttemptRecord>,
    audit: Vec<AuditEntry>,
}

impl Memory {
    /// Insert `run` unless it is there: a stored run keeps its progress.
    fn insert_new(&mut self, run: &RunRecord) {
        if !self.runs.contains_key(&run.run_id) {
            self.owners
                .entry(run.conversation_id.clone())
                .or_insert_with(|| run.user_id.clone());
            self.runs.insert(run.run_id.clone(), run.clone());
        }
    }
}

impl MemoryStore {
    fn with<T>(&self, f: impl FnOnce(&mut Memory) -> T) -> Result<T, StoreError> {
        let mut guard = self
            .inner
            .lock()
            .map_err(|_| StoreError::Unavailable("memory store poisoned".into()))?;
        Ok(f(&mut guard))
    }
}

#[async_trait]
impl Store for MemoryStore {
    async fn create_run(&self, run: &RunRecord) -> Result<(), StoreError> {
        self.with(|m| m.insert_new(run))
    }

    async fn conversation_owner(
        &self,
        conversation_id: &str,
    ) -> Result<Option<String>, StoreError> {
        self.with(|m| m.owners.get(conversation_id).cloned())
    }

    async fn create_queued(&self, job: &RunJob, now_ms: u64) -> Result<Created, StoreError> {
        let text = serde_json::to_string(job).map_err(|e| StoreError::Invalid(e.to_string()))?;
        let record = RunRecord::queued(job, now_ms);
        self.with(|m| {
            if let Some(key) = idem_key(job) {
                let holder = m.keys.entry(key).or_insert_with(|| job.run_id.clone());
                if *holder != job.run_id {
                    return Created::Existing(holder.clone());
                }
            }
            m.insert_new(&record);
            m.jobs.entry(job.run_id.clone()).or_insert(text);
            Created::New
        })
    }

    async fn keyed_run(&self, user_id: &str, key: &str) -> Result<Option<String>, StoreError> {
        self.with(|m| m.keys.get(&key_of(user_id, key)).cloned())
    }

    async fn job(&self, run_id: &str) -> Result<Option<String>, StoreError> {
        self.with(|m| m.jobs.get(run_id).cloned())
    }

    async fn retried_as(&self, run_id: &str) -> Result<Vec<String>, StoreError> {
        self.with(|m| {
            let mut retries: Vec<&RunRecord> = m
                .runs
                .values()
                .filter(|r| r.retry_of.as_deref() == Some(run_id))
                .collect();
            retries.sort_by(|a, b| (a.created_ms, &a.run_id).cmp(&(b.created_ms, &b.run_id)));
            retries.into_iter().map(|r| r.run_id.clone()).collect()
        })
    }

    async fn unsettled_jobs(
        &self,
        before_ms: u64,
        running_before_ms: u64,
        after: Option<&UnsettledCursor>,
        limit: u32,
    ) -> Result<Vec<UnsettledJob>, StoreError> {
        self.with(|m| {
            let mut stale: Vec<UnsettledJob> = m
                .jobs
                .iter()
                .filter_map(|(id, job)| m.runs.get(id).map(|run| (run, job)))
                .filter(|(run, _)| {
                    let stale = match run.status {
                        RunStatus::Queued | RunStatus::Delayed => run.updated_ms < before_ms,
                        RunStatus::Running => run.updated_ms < running_before_ms,
                        _ => false,
                    };
                    stale
                        && after.is_none_or(|a| {
                            (run.updated_ms, run.run_id.as_str()) > (a.updated_ms, &a.run_id)
                        })
                })
                .map(|(run, job)| UnsettledJob {
                    run_id: run.run_id.clone(),
                    updated_ms: run.updated_ms,
                    job: job.clone(),
                })
                .collect();
            stale.sort_by(|a, b| (a.updated_ms, &a.run_id).cmp(&(b.updated_ms, &b.run_id)));
            stale.truncate(limit as usize);
            stale
        })
    }

    async fn transition(
        &self,
        run_id: &str,
        from: &[RunStatus],
        to: Transition<'_>,
    ) -> Result<bool, StoreError> {
        self.with(|m| {
            let Some(run) = m.runs.get_mut(run_id).filter(|r| from.contains(&r.status)) else {
                return false;
            };
            run.status = to.status;
            run.code = to.code;
            if let Some(summary) = to.summary {
                run.summary = Some(summary.to_string());
            }
            if to.status != RunStatus::AwaitingApproval {
                run.pending_tool_call = None;
            }
            run.updated_ms = to.now_ms;
            true
        })
    }

    async fn discard_queued(&self, run_id: &str) -> Result<(), StoreError> {
        self.with(|m| {
            let unstarted = m
                .runs
                .get(run_id)
                .is_some_and(|r| r.status == RunStatus::Queued && r.state.counters.calls == 0);
            if unstarted {
                m.runs.remove(run_id);
                m.jobs.remove(run_id);
                m.keys.retain(|_, holder| holder != run_id);
            }
        })
    }

    async fn connection(&self, _id: &str) -> Result<Option<ConnectionInfo>, StoreError> {
        Ok(None)
    }

    async fn run(&self, run_id: &str) -> Result<Option<RunRecord>, StoreError> {
        self.with(|m| m.runs.get(run_id).cloned())
    }

    async fn save_run(&self, run: &RunRecord) -> Result<(), StoreError> {
        self.with(|m| {
            if let (RunStatus::AwaitingApproval, Some(call)) = (run.status, &run.pending_tool_call)
            {
                let approvals = m.approvals.entry(run.run_id.clone()).or_default();
                if !approvals.iter().any(|a| a.tool_call.id == call.id) {
                    approvals.push(ApprovalRecord {
                        run_id: run.run_id.clone(),
                        tool_call: call.clone(),
                        created_ms: run.updated_ms,
                        decided: None,
                    });
                }
            }
            m.runs.insert(run.run_id.clone(), run.clone());
        })
    }

    async fn transcript(&self, conversation_id: &str) -> Result<Vec<Message>, StoreError> {
        self.with(|m| {
            m.conversations
                .get(conversation_id)
                .cloned()
                .unwrap_or_default()
        })
    }

    async fn append_message(
        &self,
        conversation_id: &str,
        run_id: &str,
        key: &str,
        message: &Message,
    ) -> Result<(), StoreError> {
        self.with(|m| {
            if m.appended.insert((run_id.to_string(), key.to_string())) {
                m.conversations
                    .entry(conversation_id.to_string())
                    .or_default()
                    .push(message.clone());
            }
        })
    }

    async fn delete_last_assistant_turn(&self, conversation_id: &str) -> Result<(), StoreError> {
        self.with(|m| {
            if let Some(msgs) = m.conversations.get_mut(conversation_id) {
                let keep = msgs
                    .iter()
                    .rposition(|msg| msg.role == Role::User)
                    .map_or(0, |i| i + 1);
                msgs.truncate(keep);
            }
        })
    }

    async fn record_attempt(&self, attempt: &AttemptRecord) -> Result<(), StoreError> {
        self.with(|m| {
            let attempts = m.attempts.entry(attempt.run_id.clone()).or_default();
            match attempts.iter_mut().find(|a| a.n == attempt.n) {
                Some(earlier) => *earlier = attempt.clone(),
                None => attempts.push(attempt.clone()),
            }
        })
    }

    async fn attempts(&self, run_id: &str) -> Result<Vec<AttemptRecord>, StoreError> {
        self.with(|m| m.attempts.get(run_id).cloned().unwrap_or_default())
    }

    async fn record_canary(&self, canary: &CanaryRecord) -> Result<(), StoreError> {
        self.with(|m| m.canaries.push(canary.attempt.clone()))
    }

    async fn last_canaries(&self) -> Result<Vec<CanaryRecord>, StoreError> {
        self.with(|m| newest_per_provider(m.canaries.clone()))
    }

    async fn record_decision(
        &self,
        run_id: &str,
        tool_call_id: &str,
        decided: &Decided,
    ) -> Result<(), StoreError> {
        self.with(|m| {
            let awaited = m
                .approvals
                .get_mut(run_id)
                .and_then(|a| a.iter_mut().find(|a| a.tool_call.id == tool_call_id));
            if let Some(approval) = awaited {
                approval.decided.get_or_insert_with(|| decided.clone());
            }
        })
    }

    async fn approvals(&self, run_id: &str) -> Result<Vec<ApprovalRecord>, StoreError> {
        self.with(|m| m.approvals.get(run_id).cloned().unwrap_or_default())
    }

    async fn list_runs(
        &self,
        filter: &RunFilter,
        after: Option<&RunCursor>,
        limit: u32,
    ) -> Result<RunPage, StoreError> {
        let limit = limit.clamp(1, MAX_PAGE) as usize;
        self.with(|m| {
            let mut runs: Vec<RunRecord> = m
                .runs
                .values()
                .filter(|r| {
                    filter.matches(r, input_of(m, &r.run_id).as_deref())
                        && after.is_none_or(|c| c.precedes(r))
                })
                .cloned()
                .collect();
            runs.sort_by(|a, b| (b.created_ms, &b.run_id).cmp(&(a.created_ms, &a.run_id)));
            let next = (runs.len() > limit).then(|| RunCursor::after(&runs[limit - 1]));
            runs.truncate(limit);
            RunPage { runs, next }
        })
    }

    async fn count_runs(&self, filter: &RunFilter) -> Result<Vec<(RunStatus, u64)>, StoreError> {
        let filter = filter.any_status();
        self.with(|m| {
            let mut counts: Vec<(RunStatus, u64)> = Vec::new();
            let matching = m
                .runs
                .values()
                .filter(|r| filter.matches(r, input_of(m, &r.run_id).as_deref()));
            for run in matching {
                match counts.iter_mut().find(|(s, _)| *s == run.status) {
                    Some((_, n)) => *n += 1,
                    None => counts.push((run.status, 1)),
                }
            }
            counts.sort_by_key(|(status, _)| *status as u8);
            counts
        })
    }

    async fn count_by_status(&self) -> Result<Vec<StatusCount>, StoreError> {
        self.with(|m| {
            let mut counts: HashMap<_, u64> = HashMap::new();
            for r in m.runs.values() {
                *counts.entry((r.status, r.code)).or_default() += 1;
            }
            let mut counts: Vec<StatusCount> = counts
                .into_iter()
                .map(|((status, code), runs)| StatusCount { status, code, runs })
                .collect();
            sort_counts(&mut counts);
            counts
        })
    }

    async fn ended_since(
        &self,
        from_ms: u64,
        bucket_ms: u64,
    ) -> Result<Vec<EndedCount>, StoreError> {
        self.with(|m| {
            let mut counts: HashMap<(RunStatus, u64), u64> = HashMap::new();
            for r in m.runs.values() {
                if super::ENDED.contains(&r.status) && r.updated_ms >= from_ms {
                    let bucket = (r.updated_ms - from_ms) / bucket_ms.max(1);
                    *counts.entry((r.status, bucket)).or_default() += 1;
                }
            }
            counts
                .into_iter()
                .map(|((status, bucket), runs)| EndedCount {
                    status,
                    bucket,
                    runs,
                })
                .collect()
        })
    }

    async fn usage_by_day(
        &self,
        tenants: &[String],
        bounds: &[u64],
    ) -> Result<Vec<RouteDay>, StoreError> {
        if !check_usage_args(tenants, bounds)? {
            return Ok(Vec::new());
        }
        self.with(|m| {
            let mut sums: HashMap<(String, u64, String), (u64, f64)> = HashMap::new();
            for (run_id, attempts) in &m.attempts {
                let Some(run) = m.runs.get(run_id) else {
                    continue;
                };
                if !tenants.contains(&run.tenant) {
                    continue;
                }
                for a in attempts {
                    let Some(day) = day_of(bounds, a.t_ms) else {
                        continue;
                    };
                    let key = (run.tenant.clone(), day, a.route.clone());
                    let sum = sums.entry(key).or_default();
                    sum.0 += 1;
                    sum.1 += a.cost_usd;
                }
            }
            let mut rows: Vec<RouteDay> = sums
                .into_iter()
                .map(
                    |((tenant, day_start_ms, route), (calls, cost_usd))| RouteDay {
                        tenant,
                        day_start_ms,
                        route,
                        calls,
                        cost_usd,
                    },
                )
                .collect();
            sort_usage(&mut rows);
            rows
        })
    }

    async fn recent_tenants(
        &self,
        since_ms: u64,
        limit: u32,
    ) -> Result<Vec<TenantSeen>, StoreError> {
        let limit = limit.clamp(1, MAX_PAGE) as usize;
        self.with(|m| {
            // Per tenant: its runs, and its newest run (by creation, then id).
            let mut seen: HashMap<&str, (u64, &RunRecord)> = HashMap::new();
            for run in m.runs.values().filter(|r| r.created_ms >= since_ms) {
                let entry = seen.entry(run.tenant.as_str()).or_insert((0, run));
                entry.0 += 1;
                if (run.created_ms, &run.run_id) > (entry.1.created_ms, &entry.1.run_id) {
                    entry.1 = run;
                }
            }
            let mut tenants: Vec<TenantSeen> = seen
                .into_iter()
                .map(|(tenant, (runs, newest))| TenantSeen {
                    tenant: tenant.to_string(),
                    tier: newest.tier.clone(),
                    runs,
                    last_run_ms: newest.created_ms,
                })
                .collect();
            sort_tenants(&mut tenants);
            tenants.truncate(limit);
            tenants
        })
    }
}

#[async_trait]
impl AuditLog for MemoryStore {
    async fn record_action(&self, entry: &AuditEntry) -> Result<(), StoreError> {
        self.with(|m| m.audit.push(entry.clone()))
    }

    async fn actions(
        &self,
        before: Option<&str>,
        limit: u32,
    ) -> Result<Vec<AuditEntry>, StoreError> {
        let limit = limit.clamp(1, super::MAX_AUDIT_PAGE) as usize;
        self.with(|m| {
            let mut older: Vec<AuditEntry> = m
                .audit
                .iter()
                .filter(|e| before.is_none_or(|b| e.id.as_str() < b))
                .cloned()
                .collect();
            older.sort_by(|a, b| b.id.cmp(&a.id));
            older.truncate(limit);
            older
        })
    }
}

/// The input run `run_id` was asked, from its kept job.
fn input_of(m: &Memory, run_id: &str) -> Option<String> {
    let job = m.jobs.get(run_id)?;
    serde_json::from_str::<RunJob>(job).ok()?.request.input
}
