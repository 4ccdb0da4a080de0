//! The run engine (docs/design.md §2, §4.1): pre-flight, the chain walk of step 1, later steps,
//! tools, approvals, snoozes and the budget, as one resumable state machine.
//!
//! Every delivery of a job calls [`Engine::execute`]. The run's position (counters, route, flags)
//! is saved in the store before each provider call and the transcript holds its messages, so a
//! snoozed or crashed run resumes where it stopped, on the same route, with the calls it already
//! spent still counted.
//!
//! This file is the run from delivery to end (lease, pre-flight, stops); each part of it is a
//! file of its own: `walk` (step 1's chain walk and later steps' route), `steps` (the step loop,
//! tools, the summary), `attempt` (one provider call and its classification), `persist` (saves,
//! kept writes, events), `pace` and `spend` (a pool's slots, a priced call's reservation) and
//! `canary`.

mod attempt;
mod canary;
mod pace;
mod persist;
mod spend;
mod steps;
mod walk;

pub use pace::{close_full_pools, give_back};
pub use spend::{Spender, close_capped_routes};

use crate::budget::Budget;
use crate::catalog::Catalog;
use crate::chat::{Message, ToolCall};
use crate::clock::{Clock, SystemClock};
use crate::events::{Event, EventError};
use crate::fleet::{Fleet, FleetError};
use crate::job::{HeldSlot, RunJob};
use crate::lease::{LEASE_RENEWAL, LEASE_TTL, Lease};
use crate::metrics;
use crate::preflight::{self, Preflight, Waiting};
use crate::provider::{ChatProvider, TargetError, Targets};
use crate::rest::Closure;
use crate::route::Route;
use crate::run::{Code, RunRecord, RunStatus};
use crate::store::{Attached, Store, StoreError};
use crate::tools::ToolRunner;
use std::collections::HashMap;
use std::sync::Arc;
use tracing::Instrument;

/// Jitter added after a reopening moment, never before it (docs/design.md §4.2).
pub const SNOOZE_JITTER_MS: (u64, u64) = (0, 2_000);
/// The one-route retry's pause (docs/design.md §2.2, rule 5).
pub const RETRY_PAUSE_MS: (u64, u64) = (1_000, 3_000);

/// What the caller does when every route is closed and the deadline allows a wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WhenResting {
    /// The queue re-pushes the run to run after the reopening moment.
    Snooze,
    /// `worker run-one` has no queue: it refuses with `retry_after_s`.
    Refuse,
}

/// How one delivery of a job ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// The run had already settled (a second delivery); nothing was done.
    Skipped(RunStatus),
    /// The job is not one a run can come from (a continuation of no run of its user and
    /// conversation): the queue dead-letters it `invalid_job`; nothing was done.
    Invalid(String),
    /// Another delivery of the run is executing; try this one again after `retry_after`.
    Busy {
        retry_after: std::time::Duration,
    },
    /// Re-run the job at `until_ms` (the run's status is `delayed`), with the pool's slot it
    /// holds for then, if any.
    Snoozed {
        until_ms: u64,
        reason: String,
        slot: Option<HeldSlot>,
    },
    Refused {
        code: Code,
        retry_after_s: u64,
    },
    AwaitingApproval(ToolCall),
    Finished {
        status: RunStatus,
        code: Option<Code>,
    },
}

/// Infrastructure faults: the job should be retried by the queue, the run is not at fault.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Rest(#[from] FleetError),
    #[error(transparent)]
    Event(#[from] EventError),
    #[error(transparent)]
    Targets(#[from] TargetError),
    /// Not a fault: the run was cancelled before a call. [`Engine::execute`] ends the run
    /// `cancelled` on it; no caller sees it.
    #[error("the run was cancelled by {by}")]
    Cancelled { by: String },
    /// Another executor holds the run's lease (this one was thought gone): this one stops
    /// before its next call, so the run is not paid for twice.
    #[error("another executor holds the run's lease")]
    LeaseLost,
}

/// Everything a run needs, shared by every job a worker runs.
#[derive(Clone)]
pub struct Engine {
    provider: Arc<dyn ChatProvider>,
    targets: Arc<dyn Targets>,
    store: Arc<dyn Store>,
    fleet: Fleet,
    clock: Arc<dyn Clock>,
    tools: ToolRunner,
    /// `FREEWAY_SUMMARY=on`.
    summary: bool,
    /// Whether pools learn what their providers state (`FREEWAY_LEARN_LIMITS`, on by default).
    learning: bool,
    /// This replica's name, for the `started` event and lease owners.
    worker: String,
    /// The tiers (a tenant's weight in a shared pool) and prices in force.
    catalog: Arc<Catalog>,
    /// The leases this engine's executions hold (run id → owner), to hand back at once at
    /// shutdown ([`Engine::release_leases`]) rather than leave them to expire.
    held: Arc<std::sync::Mutex<HashMap<String, String>>>,
}

impl Engine {
    /// An engine calling `provider` with the keys `targets` gives, keeping runs in `store` and
    /// sharing rests, leases, events and counters through `fleet`. It starts on the system clock,
    /// with no tools, no summaries and the name `worker`; the `with_*` methods change that.
    pub fn new(
        provider: Arc<dyn ChatProvider>,
        targets: Arc<dyn Targets>,
        store: Arc<dyn Store>,
        fleet: Fleet,
    ) -> Engine {
        Engine {
            provider,
            targets,
            store,
            fleet,
            clock: Arc::new(SystemClock),
            tools: ToolRunner::default(),
            summary: false,
            learning: true,
            worker: "worker".to_string(),
            catalog: Arc::new(Catalog::builtin()),
            held: Arc::default(),
        }
    }

    /// The configuration's tiers and prices (the built-in ones until set).
    pub fn with_catalog(mut self, catalog: Arc<Catalog>) -> Engine {
        self.catalog = catalog;
        self
    }

    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Engine {
        self.clock = clock;
        self
    }

    pub fn with_tools(mut self, tools: ToolRunner) -> Engine {
        self.tools = tools;
        self
    }

    /// Whether a finished chat run makes one more call for a summary (`FREEWAY_SUMMARY`).
    pub fn with_summary(mut self, summary: bool) -> Engine {
        self.summary = summary;
        self
    }

    /// Whether pools learn the limits, window phase and use their providers state, and pacing
    /// misses lower a working limit (`FREEWAY_LEARN_LIMITS`); off, only the configuration
    /// paces (for comparison in the benchmarks).
    pub fn with_learning(mut self, learning: bool) -> Engine {
        self.learning = learning;
        self
    }

    /// The replica's name, as events and leases show it.
    pub fn named(mut self, worker: impl Into<String>) -> Engine {
        self.worker = worker.into();
        self
    }

    /// Where this engine keeps runs.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// Write the counts the fleet's counters still hold back (the worker's housekeeping).
    pub async fn flush_metrics(&self) {
        self.fleet.metrics.flush().await;
    }
}

/// One run in progress: its job, chain, budget and record.
pub(crate) struct Run<'a> {
    pub job: &'a RunJob,
    pub routes: &'a [Route],
    pub budget: Budget,
    pub rec: RunRecord,
    /// The closures pre-flight read, for the chain walk's first pick.
    pub preflight_closures: Option<Vec<Option<Closure>>>,
    /// Writes that wait for the run's next save and are committed with it, all or none: the
    /// input, the model's turns, tool results, an attempt that succeeded, a broken stream's
    /// text. The transcript the run works from is the stored one followed by these messages.
    pub unsaved: Vec<Attached>,
    /// The stored transcript as read with the run when the delivery began, for its first step;
    /// later steps, and a regenerate that deleted a turn, read the store again.
    pub stored_transcript: Option<Vec<Message>>,
    /// The pool's slot the run holds: the job's until it is used, or one taken to wait for.
    pub slot: Option<HeldSlot>,
    /// The tokens its next call is expected to spend, for pools that count them: from the
    /// job's input until a step's messages are known.
    pub tokens: u32,
    /// Who holds its lease: this delivery's executor.
    pub owner: &'a str,
    /// When Redis last confirmed that `owner` holds the lease (engine clock, ms): taking it,
    /// or renewing it before a call.
    pub lease_confirmed_ms: u64,
}

/// How a step ended when it did not produce a completion.
pub(crate) enum Stop {
    Snooze { until_ms: u64, reason: String },
    Refuse { code: Code, retry_after_s: u64 },
    End(Code),
}

impl Stop {
    /// The stop a closed chain calls for. (An open chain calls for none; a caller that asks
    /// anyway gets the end of a chain with nothing left to try.)
    fn of(closed: Preflight) -> Stop {
        match closed {
            Preflight::Wait { until_ms, reason } => Stop::Snooze { until_ms, reason },
            Preflight::Refuse {
                code,
                retry_after_s,
            } => Stop::Refuse {
                code,
                retry_after_s,
            },
            Preflight::Open | Preflight::Closed => Stop::End(Code::RoutesExhausted),
        }
    }
}

impl Engine {
    /// Run one delivery of `job` (already validated; `routes` is its resolved chain), holding the
    /// run's lease while it executes.
    pub async fn execute(
        &self,
        job: &RunJob,
        routes: &[Route],
        when_resting: WhenResting,
    ) -> Result<Outcome, EngineError> {
        let owner = format!("{}:{}", self.worker, ulid::Ulid::generate());
        let lease = self.fleet.leases.acquire(&job.run_id, &owner).await?;
        if let Lease::HeldFor(retry_after) = lease {
            return Ok(Outcome::Busy { retry_after });
        }
        self.hold(&job.run_id, Some(&owner));
        let run = self.execute_leased(job, routes, when_resting, &owner);
        tokio::pin!(run);
        let mut renew = tokio::time::interval(LEASE_RENEWAL);
        renew.tick().await;
        let outcome = loop {
            tokio::select! {
                outcome = &mut run => break outcome,
                // A Redis error here is no reason to drop a run in the middle of its call: the
                // lease lives three renewals, and the next tick tries again.
                _ = renew.tick() => match self.fleet.leases.renew(&job.run_id, &owner).await {
                    Ok(true) => {}
                    Ok(false) => {
                        tracing::warn!(run_id = %job.run_id, "lost the run's lease while executing it");
                    }
                    Err(e) => {
                        tracing::warn!(run_id = %job.run_id, error = %e, "could not renew the run's lease; trying again at the next renewal");
                    }
                }
            }
        };
        // The run is over either way; a lease that cannot be released expires on its own.
        if let Err(e) = self.fleet.leases.release(&job.run_id, &owner).await {
            tracing::warn!(run_id = %job.run_id, error = %e, "could not release the run's lease; it expires on its own");
        }
        self.hold(&job.run_id, None);
        outcome
    }

    /// Note that this engine holds `run_id`'s lease as `owner`, or no longer (`None`).
    fn hold(&self, run_id: &str, owner: Option<&str>) {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        match owner {
            Some(owner) => held.insert(run_id.to_string(), owner.to_string()),
            None => held.remove(run_id),
        };
    }

    /// Hand back every lease an execution still holds: at shutdown, once the grace is over and
    /// the executions that did not finish were dropped, so another replica can take their runs
    /// at once instead of after [`LEASE_TTL`]. Returns how many were handed back.
    pub async fn release_leases(&self) -> usize {
        let held: Vec<(String, String)> = {
            let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
            held.drain().collect()
        };
        for (run_id, owner) in &held {
            if let Err(e) = self.fleet.leases.release(run_id, owner).await {
                tracing::warn!(%run_id, error = %e, "could not hand back the run's lease");
            }
        }
        held.len()
    }

    async fn execute_leased(
        &self,
        job: &RunJob,
        routes: &[Route],
        when_resting: WhenResting,
        owner: &str,
    ) -> Result<Outcome, EngineError> {
        // A run is stored by its first save (or by the producer at enqueue): a delivery that
        // stops before saving leaves nothing behind. What is only needed before the steps is
        // read in a block, and pre-flight sits behind `proceed`: a local of this body would take
        // room in the run's future for the whole run, at each of thousands of runs in flight.
        let acquired_ms = self.clock.now_ms();
        self.recover_unsaved(&job.run_id).await?;
        let (rec, transcript) = {
            let (stored, transcript) = self
                .store
                .run_and_transcript(&job.run_id, &job.conversation_id)
                .await?;
            let rec = stored.unwrap_or_else(|| RunRecord::queued(job, self.clock.now_ms()));
            (rec, transcript)
        };
        if rec.status.is_settled() {
            return Ok(Outcome::Skipped(rec.status));
        }
        if let Some(why) = self.foreign_continuation(job).await? {
            return Ok(Outcome::Invalid(why));
        }
        let budget = Budget::new(job.request.kind, routes.len(), self.summary);
        let mut run = Run {
            job,
            routes,
            budget,
            rec,
            preflight_closures: None,
            unsaved: Vec::new(),
            stored_transcript: Some(transcript),
            slot: job.slot.clone(),
            tokens: job.first_call_tokens(),
            owner,
            lease_confirmed_ms: acquired_ms,
        };
        let outcome = self.proceed(&mut run, when_resting).await?;
        // Only a snoozed run takes its held slot along; any other gives it back.
        if !matches!(outcome, Outcome::Snoozed { .. }) {
            self.release_slot(&mut run).await?;
        }
        // A settled run's calls are final; a snoozed one counts when it settles.
        if matches!(
            outcome,
            Outcome::Refused { .. } | Outcome::AwaitingApproval(_) | Outcome::Finished { .. }
        ) {
            let calls = run.rec.state.counters.calls;
            self.fleet.metrics.add(metrics::run(calls)).await;
        }
        Ok(outcome)
    }

    /// Pre-flight, then the run's steps if it passed.
    async fn proceed(
        &self,
        run: &mut Run<'_>,
        when_resting: WhenResting,
    ) -> Result<Outcome, EngineError> {
        let preflight = self.preflight(run, when_resting);
        if let Some(stopped) = preflight
            .instrument(tracing::info_span!("preflight"))
            .await?
        {
            return Ok(stopped);
        }
        self.start(run).await?;
        match self.steps(run, when_resting).await {
            Err(EngineError::Cancelled { by }) => {
                tracing::info!(run_id = %run.job.run_id, %by, "cancelled before its next call");
                self.cancelled(run, by).await
            }
            Err(EngineError::LeaseLost) => {
                // Its other executor carries it on; this delivery looks again once that one's
                // lease would have lapsed, and finds it settled or takes it over.
                tracing::warn!(run_id = %run.job.run_id, "another executor holds the run: stopped before its next call");
                Ok(Outcome::Busy {
                    retry_after: LEASE_TTL,
                })
            }
            stepped => stepped,
        }
    }

    /// Why a continuation may not run, if it may not: it carries a tool result into a parent
    /// run's conversation, so that parent must exist and be the same user's, on the same
    /// conversation. A queue entry is no proof of either.
    async fn foreign_continuation(&self, job: &RunJob) -> Result<Option<String>, EngineError> {
        let Some(c) = &job.continuation else {
            return Ok(None);
        };
        let parent = self.store.run(&c.parent_run_id).await?;
        let ours = parent.is_some_and(|p| {
            p.user_id == job.request.user_id && p.conversation_id == job.conversation_id
        });
        Ok((!ours).then(|| {
            format!(
                "continuation of {}: no such run of this user and conversation",
                c.parent_run_id
            )
        }))
    }

    /// docs/design.md §4.1: deadline and closed chains, before the transcript is touched.
    async fn preflight(
        &self,
        run: &mut Run<'_>,
        when_resting: WhenResting,
    ) -> Result<Option<Outcome>, EngineError> {
        let now = self.clock.now_ms();
        if now >= run.job.deadline_ms {
            let outcome = if run.rec.state.input_applied {
                self.finish(run, RunStatus::Failed, Some(Code::DeadlineExceeded))
                    .await?
            } else {
                self.refuse(run, Code::DeadlineExceeded, 0).await?
            };
            return Ok(Some(outcome));
        }
        // A continuation is never delayed or refused for a rest, and a run already on its route
        // checks that route at its next step.
        if run.job.is_continuation() || run.rec.state.route_index.is_some() {
            return Ok(None);
        }
        let closures = self.closures(run).await?;
        let routes = run.routes;
        let decided = self.decide(routes, &closures, run, when_resting);
        match self.hold_slot(run, routes, &closures, decided).await? {
            Preflight::Open => {
                run.preflight_closures = Some(closures);
                Ok(None)
            }
            closed => Ok(Some(self.stop(run, Stop::of(closed)).await?)),
        }
    }

    /// The chain's closures as this run sees them: Redis rests, its own ambiguous stop, and
    /// pools with no slot now.
    pub(crate) async fn closures(
        &self,
        run: &Run<'_>,
    ) -> Result<Vec<Option<Closure>>, EngineError> {
        let mut closures = self.fleet.rests.closures(run.routes).await?;
        if run.rec.state.ambiguous_stop {
            for (c, route) in closures.iter_mut().zip(run.routes) {
                if route.is_shared() && c.is_none() {
                    *c = Some(Closure::forever("ambiguous stop"));
                }
            }
        }
        self.pace_closures(run, run.routes, &mut closures).await?;
        self.spend_closures(run, run.routes, &mut closures).await?;
        Ok(closures)
    }

    /// [`preflight::decide`] for `routes` of `run` with their `closures`: a run the queue
    /// holds may wait, `worker run-one` may not.
    pub(crate) fn decide(
        &self,
        routes: &[Route],
        closures: &[Option<Closure>],
        run: &Run<'_>,
        when_resting: WhenResting,
    ) -> Preflight {
        let waiting = match when_resting {
            WhenResting::Snooze => Waiting::Allowed {
                jitter_ms: self.clock.jitter_ms(SNOOZE_JITTER_MS.0, SNOOZE_JITTER_MS.1),
            },
            WhenResting::Refuse => Waiting::NotAllowed,
        };
        preflight::decide(
            routes,
            closures,
            run.job.deadline_ms,
            self.clock.now_ms(),
            waiting,
        )
    }

    /// Carry out a [`Stop`]: snooze, refuse or end the run.
    pub(crate) async fn stop(&self, run: &mut Run<'_>, stop: Stop) -> Result<Outcome, EngineError> {
        match stop {
            Stop::Snooze { until_ms, reason } => {
                // A run that wakes after its held slot is over will not use it.
                if run.slot.as_ref().is_some_and(|s| s.until_ms <= until_ms) {
                    self.release_slot(run).await?;
                }
                run.rec.status = RunStatus::Delayed;
                run.rec.state.snoozes += 1;
                self.save(run).await?;
                self.publish(
                    run,
                    Event::Delayed {
                        until_ms,
                        reason: reason.clone(),
                    },
                )
                .await?;
                Ok(Outcome::Snoozed {
                    until_ms,
                    reason,
                    slot: run.slot.clone(),
                })
            }
            Stop::Refuse {
                code,
                retry_after_s,
            } => self.refuse(run, code, retry_after_s).await,
            Stop::End(code) => self.finish(run, RunStatus::Failed, Some(code)).await,
        }
    }

    async fn refuse(
        &self,
        run: &mut Run<'_>,
        code: Code,
        retry_after_s: u64,
    ) -> Result<Outcome, EngineError> {
        run.rec.status = RunStatus::Refused;
        run.rec.code = Some(code);
        self.save(run).await?;
        self.publish(
            run,
            Event::Refused {
                code,
                retry_after_s,
            },
        )
        .await?;
        Ok(Outcome::Refused {
            code,
            retry_after_s,
        })
    }

    /// Pre-flight passed: mark the run running and apply its input to the transcript, once.
    ///
    /// Nothing is saved here: the next save — before the first call, or as the run stops without
    /// one — carries the input, the mark and the status together. A regenerate's delete happens
    /// at once; it is idempotent (nothing after the last user message), like the keyed append.
    async fn start(&self, run: &mut Run<'_>) -> Result<(), EngineError> {
        if !run.rec.state.input_applied {
            let input = if let Some(c) = &run.job.continuation {
                Some(Message::tool_result(
                    c.tool_call.id.clone(),
                    c.result.clone(),
                ))
            } else if run.job.request.regenerate {
                let conv = &run.job.conversation_id;
                self.store.delete_last_assistant_turn(conv).await?;
                run.stored_transcript = None;
                None
            } else {
                run.job.request.input.clone().map(Message::user)
            };
            if let Some(message) = input {
                run.unsaved.push(Attached::Message {
                    key: "input".into(),
                    message,
                });
            }
            run.rec.state.input_applied = true;
        }
        run.rec.status = RunStatus::Running;
        let worker = self.worker.clone();
        self.publish(run, Event::Started { worker }).await
    }
}
