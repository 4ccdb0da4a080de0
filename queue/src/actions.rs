//! What an operator (or the web app) does to a run after it was enqueued: cancel it, retry it,
//! or end its snooze now (docs/api.md). Each checks the run's status first and answers a
//! conflict for a run the action does not fit, so a stale page or a double click changes
//! nothing.

use crate::enqueue::{EnqueueError, Enqueuer, Outcome};
use freeway::events::{Event, EventSink};
use freeway::lease::Leases;
use freeway::preflight::{self, Preflight, Waiting};
use freeway::rest::Rests;
use freeway::route::Route;
use freeway::run::{RunRecord, RunStatus};
use freeway::store::Transition;

/// Where a cancelled run stands when the request is answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cancelled {
    /// It had not started (or was waiting): it is `cancelled` now.
    Now,
    /// It is running: its executor stops it before its next call.
    BeforeNextCall,
}

/// What "run now" does to a delayed run: the answer says what will really happen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Woken {
    /// Its routes are open: it was woken and runs now (through its pool's limiter, like any
    /// call).
    Now,
    /// Its routes are still closed (a rest, a full pool): waking it would only delay it again,
    /// so it keeps waiting, until `until_ms` for the closure `reason` names.
    Waits {
        /// When the closure is due to end, epoch ms.
        until_ms: u64,
        /// What closes its routes, as the run's `delayed` event says it.
        reason: String,
    },
}

impl Enqueuer {
    /// The run, when it exists and `user` (if given) owns it.
    async fn run_of(&self, run_id: &str, user: Option<&str>) -> Result<RunRecord, EnqueueError> {
        self.store
            .run(run_id)
            .await?
            .filter(|r| user.is_none_or(|u| u == r.user_id))
            .ok_or_else(|| EnqueueError::NotFound(run_id.to_string()))
    }

    /// Cancel a run that has not ended. A run not yet running ends now (`cancelled` is
    /// published, its parked job dropped); a running one is marked, and its executor ends it
    /// before its next call.
    pub async fn cancel(
        &self,
        run_id: &str,
        user: Option<&str>,
        by: &str,
    ) -> Result<Cancelled, EnqueueError> {
        let run = self.run_of(run_id, user).await?;
        if run.status.is_final() {
            return Err(conflict(&run, "cancelled"));
        }
        self.fleet.leases().cancel(run_id, by).await?;
        if run.status == RunStatus::Running {
            return Ok(Cancelled::BeforeNextCall);
        }
        // One step in the store against an approval (or a worker) racing this cancel.
        let cancelled = Transition {
            status: RunStatus::Cancelled,
            code: None,
            summary: None,
            now_ms: freeway::clock::epoch_ms(),
        };
        let waiting = [
            RunStatus::Queued,
            RunStatus::Delayed,
            RunStatus::AwaitingApproval,
        ];
        if !self.store.transition(run_id, &waiting, cancelled).await? {
            let now_is = self.run_of(run_id, user).await?;
            return match now_is.status {
                // A worker took it meanwhile: it stops before its next call.
                RunStatus::Running => Ok(Cancelled::BeforeNextCall),
                _ => Err(conflict(&now_is, "cancelled")),
            };
        }
        if let Some(job) = self.queue.forget(run_id).await?
            && let Some(held) = &job.slot
        {
            // The slot it waited for (or its place in the pool's queue) goes to another run.
            let routes: Vec<Route> = job
                .request
                .routes
                .iter()
                .filter_map(|spec| Route::resolve(spec, self.catalog()).ok())
                .collect();
            let now = freeway::clock::epoch_ms();
            let tokens = job.first_call_tokens();
            freeway::engine::give_back(self.pacer(), &routes, held, run_id, tokens, now).await?;
        }
        let cancelled = Event::Cancelled {
            by: Some(by.to_string()),
        };
        self.fleet.events().publish(run_id, &cancelled).await?;
        Ok(Cancelled::Now)
    }

    /// Enqueue a failed, refused or cancelled run again as a new run with the same request and
    /// a fresh budget. A run whose input is already in the conversation is retried as a
    /// regenerate (its partial answer, if any, replaced), so the input is not sent twice.
    /// Retrying twice gives the same new run.
    /// Returns the enqueue's outcome and the new run's deadline (s).
    pub async fn retry(
        &self,
        run_id: &str,
        user: Option<&str>,
    ) -> Result<(Outcome, u64), EnqueueError> {
        let run = self.run_of(run_id, user).await?;
        if !matches!(
            run.status,
            RunStatus::Failed | RunStatus::Refused | RunStatus::Cancelled
        ) {
            return Err(conflict(&run, "retried"));
        }
        let Some(job) = self.job(run_id).await? else {
            return Err(EnqueueError::Conflict(format!(
                "run {run_id}'s request is no longer kept; enqueue it anew"
            )));
        };
        let mut request = job.request;
        request.idempotency_key = Some(format!("retry:{run_id}"));
        request.conversation_id = Some(job.conversation_id);
        if run.state.input_applied {
            request.input = None;
            request.regenerate = true;
        }
        let deadline_s = request
            .deadline_s
            .unwrap_or(freeway::job::DEFAULT_DEADLINE_S);
        let outcome = self
            .enqueue_retrying(request, Some(run_id.to_string()))
            .await?;
        Ok((outcome, deadline_s))
    }

    /// End a delayed run's snooze now, when one of its routes is open; a run whose routes are
    /// all still closed keeps waiting (woken, its pre-flight would park it again at once, or
    /// send it into a pool's window past the limiter), and the answer says until when.
    pub async fn wake(&self, run_id: &str, user: Option<&str>) -> Result<Woken, EnqueueError> {
        let run = self.run_of(run_id, user).await?;
        if run.status != RunStatus::Delayed {
            return Err(conflict(&run, "woken"));
        }
        if let Some(waits) = self.still_closed(&run).await? {
            return Ok(waits);
        }
        if !self.queue.wake(run_id, freeway::clock::epoch_ms()).await? {
            return Err(EnqueueError::Conflict(format!(
                "run {run_id} is delayed but not parked (it is being delivered)"
            )));
        }
        Ok(Woken::Now)
    }

    /// The pre-flight decision for `run` now (the same closures and the same pure decision as
    /// the worker's), when it is to wait.
    async fn still_closed(&self, run: &RunRecord) -> Result<Option<Woken>, EnqueueError> {
        let specs = match run.state.route_index {
            // A run already on its route checks that route alone at its next step.
            Some(i) => run.routes.get(i..=i).unwrap_or(&run.routes[..]),
            None => &run.routes[..],
        };
        let routes: Vec<Route> = specs
            .iter()
            .filter_map(|spec| Route::resolve(spec, self.catalog()).ok())
            .collect();
        let now = freeway::clock::epoch_ms();
        let mut closures = self.rests().closures(&routes).await?;
        let pace = self.pacer();
        freeway::engine::close_full_pools(pace, &routes, &mut closures, 0, now, None, None).await?;
        let waiting = Waiting::Allowed { jitter_ms: 0 };
        Ok(
            match preflight::decide(&routes, &closures, run.deadline_ms, now, waiting) {
                Preflight::Wait { until_ms, reason } => Some(Woken::Waits { until_ms, reason }),
                _ => None,
            },
        )
    }
}

fn conflict(run: &RunRecord, action: &str) -> EnqueueError {
    EnqueueError::Conflict(format!(
        "run {} is {} and cannot be {action}",
        run.run_id,
        run.status.as_str()
    ))
}
