//! Enqueueing a run, as one function shared by `POST /v1/runs`, `producer enqueue` and any Rust
//! web app that links this crate: validate → pre-flight → record → `queued` event → push.
//!
//! Why here and not in the worker: a run refused at enqueue costs nothing at all (no record, no
//! event, no job), and the web app learns at once, with `Retry-After`, that the shared account
//! rests (docs/api.md §1). The worker still runs its own pre-flight (docs/design.md §4.1) when it
//! takes the job, because rests change while a job waits.
//!
//! Redis keys written here, besides the queue's and the run's event stream:
//!
//! | key | what | TTL |
//! |---|---|---|
//! | `{ns}:job:{run_id}` | the job as it was pushed: an approval reads the parent's tools and request back from it | deadline + 24 h, deleted when the run settles (the store keeps the job) |
//! | `{ns}:approval:{run_id}:{tool_call_id}` | the continuation that answered this tool call: the claim that makes a second approval a conflict | 48 h |
//!
//! Which run an idempotency key names is the store's to decide, not Redis's: the key is claimed
//! in the transaction that records the run ([`Store::create_queued`]), so requests racing with
//! one key, on one producer or several, answer one run.
//!
//! The job copy is the reconciler's sign that Redis still knows an unsettled run, and what an
//! approval reads the parent's request (tools, system prompt, deadline) from. Once a run
//! settles it is deleted: Redis holds next to nothing per finished run (docs/design.md §2.5),
//! and a retry reads the job from the store.

use crate::schedule::{IDEMPOTENCY_TTL, Queue, QueueError};
use freeway::catalog::Catalog;
use freeway::chat::ToolCall;
use freeway::connect::{RedisConnection, keyed};
use freeway::engine::{Spender, close_capped_routes};
use freeway::events::{Event, EventError, EventSink};
use freeway::fleet::{FleetError, RedisFleet};
use freeway::job::{Continuation, InvalidRequest, OnRest, RunJob, RunRequest};
use freeway::metrics::RedisMetrics;
use freeway::pace::RedisPacer;
use freeway::preflight::{self, Preflight, Waiting};
use freeway::rest::{RedisRests, Rests};
use freeway::route::{Connection, Route};
use freeway::run::{Code, Decided, Decision, RunRecord, RunStatus};
use freeway::spend::RedisLedger;
use freeway::store::{Created, Store, StoreError, Transition};
use redis::AsyncCommands;
use serde::Deserialize;
use std::sync::Arc;

/// How long a job copy outlives its run's deadline (an approval may come that late).
const JOB_GRACE_MS: u64 = 24 * 3600 * 1000;
/// How many unsettled runs one reconcile round looks at.
pub const RECONCILE_BATCH: u32 = 500;
/// How many pages of [`RECONCILE_BATCH`] runs one reconcile round reads at most.
pub const RECONCILE_PAGES: u32 = 20;
/// What a reconcile round did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Reconciled {
    /// Runs Redis had lost, pushed again.
    pub pushed: usize,
    /// Runs whose job cannot be read, ended `invalid_job`.
    pub ended: usize,
}

/// How old a run recorded under an idempotency key, and not yet pushed, must be before a resend
/// of its request pushes it: younger, the request that recorded it may still be pushing it, and
/// the resend waits for that; older, that request died half-way (a killed producer). A push by
/// both is still one delivery (the first delivery's key), so the grace saves work, not runs.
const CLAIM_GRACE_MS: u64 = 2_000;
/// How often a resend looks whether the request it waits for has pushed its run.
const CLAIM_POLL: std::time::Duration = std::time::Duration::from_millis(20);
/// How many times a request claims its key again after the run that held it was discarded (its
/// request failed) before it answers [`EnqueueError::KeyInFlight`].
const CLAIM_ATTEMPTS: usize = 3;
/// What the model sees when the web app approves without a result of its own.
pub const APPROVED: &str = "approved";
/// What the model sees when the web app denies without a result of its own.
pub const DENIED: &str = "denied by the user";

/// How an enqueue ended (errors aside).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Recorded, announced and pushed.
    Enqueued {
        /// The new run.
        run_id: String,
    },
    /// The same user sent the same idempotency key before (or at the same time): that run,
    /// nothing enqueued again.
    Duplicate {
        /// The run the key already names.
        run_id: String,
    },
    /// Every route is closed and the run's `on_rest` is `refuse` (said, or an interactive run's
    /// default): nothing was written.
    Refused {
        /// Why: the closure that shuts every route (`pool_resting`, `spend_cap_reached`, …).
        code: Code,
        /// When the first route reopens, in seconds (the 429's `Retry-After`).
        retry_after_s: u64,
    },
}

/// Why a request to the queue was not carried out. Nothing a refused request asked for was
/// written.
#[derive(Debug, thiserror::Error)]
pub enum EnqueueError {
    /// The request breaks a rule of its schema (docs/api.md §1): the message says which.
    #[error(transparent)]
    Invalid(#[from] InvalidRequest),
    /// No run of that id (of this user, when a user asks).
    #[error("run {0} not found")]
    NotFound(String),
    /// Another user's conversation looks, to this user, like none at all.
    #[error("conversation {0} not found")]
    ConversationNotFound(String),
    /// A route names a connection the user does not own (or none that exists): to this user,
    /// another user's connection looks like none at all.
    #[error("connection {0} not found")]
    ConnectionNotFound(String),
    /// The run is not in a state that allows the request (an approval it is not waiting for).
    #[error("{0}")]
    Conflict(String),
    /// Requests with this idempotency key keep recording and discarding runs (each failed after
    /// recording its run): try again in `retry_after_s`.
    #[error("a request with idempotency key {key:?} is in flight; try again")]
    KeyInFlight {
        /// The idempotency key.
        key: String,
        /// When to try again, in seconds.
        retry_after_s: u64,
    },
    /// A stored job copy that does not read back.
    #[error("the kept job of run {run_id} is unreadable: {error}")]
    CorruptJob {
        /// The run whose job it is.
        run_id: String,
        /// What does not read.
        error: InvalidRequest,
    },
    /// Redis failed, or answered what it should not: the queue, or the fleet's shared state
    /// (rests, limiters, the ledger).
    #[error(transparent)]
    Redis(#[from] FleetError),
    /// The store failed: the run was not recorded, or not read.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A run's event could not be published.
    #[error(transparent)]
    Event(#[from] EventError),
    /// The job could not be pushed.
    #[error(transparent)]
    Queue(#[from] QueueError),
}

impl From<redis::RedisError> for EnqueueError {
    fn from(e: redis::RedisError) -> EnqueueError {
        EnqueueError::Redis(e.into())
    }
}

/// A person's answer to a run paused on a tool call (`POST /v1/runs/{id}/approvals`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct Approval {
    /// The tool call the run waits on.
    pub tool_call_id: String,
    /// Run the tool, or not.
    pub decision: Decision,
    /// The tool result the model sees; by default "approved" or "denied by the user".
    #[serde(default)]
    pub result: Option<String>,
}

/// Enqueues runs: the producer side of freeway as a library.
#[derive(Clone)]
pub struct Enqueuer {
    pub(crate) queue: Queue,
    /// The fleet's state: rests, leases, events, the spend ledger refusing a run only priced
    /// routes past a cap are left to.
    pub(crate) fleet: RedisFleet,
    pub(crate) store: Arc<dyn Store>,
    pub(crate) catalog: Arc<Catalog>,
}

impl Enqueuer {
    /// An enqueuer on the Redis `conn` and the `store` the workers use, in namespace `ns`
    /// (`FREEWAY_NAMESPACE`): OpenRouter's built-in catalog, one lane, events kept an hour.
    pub fn new(conn: RedisConnection, ns: &str, store: Arc<dyn Store>) -> Enqueuer {
        Enqueuer::on(RedisFleet::new(conn, ns), store)
    }

    /// An enqueuer on the process's handle on the fleet (its Redis and namespace) and the
    /// `store` the workers use: OpenRouter's built-in catalog, one lane.
    pub fn on(fleet: RedisFleet, store: Arc<dyn Store>) -> Enqueuer {
        Enqueuer {
            queue: Queue::new(fleet.connection(), fleet.namespace()),
            fleet,
            store,
            catalog: Arc::new(Catalog::builtin()),
        }
    }

    /// Spread runs over `lanes` queues (`FREEWAY_QUEUES`, [`crate::lane`]); every process of
    /// the fleet must be given the same number.
    pub fn with_lanes(mut self, lanes: usize) -> Enqueuer {
        self.queue = self.queue.with_lanes(lanes);
        self
    }

    /// The heartbeat of the replica that consumes through this enqueuer's queue
    /// (`worker --heartbeat-s`), so a worker holds one queue handle.
    pub fn with_heartbeat(mut self, heartbeat: std::time::Duration) -> Enqueuer {
        self.queue = self.queue.with_heartbeat(heartbeat);
        self
    }

    /// Validate routes against `catalog`'s providers and pools instead of the built-in ones
    /// (OpenRouter and its free pool); give it the catalog the workers have.
    pub fn with_catalog(mut self, catalog: Arc<Catalog>) -> Enqueuer {
        self.catalog = catalog;
        self
    }

    /// Keep a run's event stream `keep_s` after its last event (`FREEWAY_EVENTS_KEEP_S`).
    pub fn keeping_events(mut self, keep_s: u64) -> Enqueuer {
        self.fleet = self.fleet.keeping_events(keep_s);
        self
    }

    /// The providers and pools runs are validated against.
    pub fn catalog(&self) -> &Arc<Catalog> {
        &self.catalog
    }

    /// The apalis queue the runs are pushed on.
    pub fn queue(&self) -> &Queue {
        &self.queue
    }

    /// The fleet's state this enqueuer reads and writes.
    pub fn fleet(&self) -> &RedisFleet {
        &self.fleet
    }

    /// The fleet's rests, which the pre-flight reads.
    pub fn rests(&self) -> &RedisRests {
        self.fleet.rests()
    }

    /// The fleet's counters, which the workers add to in the same Redis and namespace.
    pub fn metrics(&self) -> &RedisMetrics {
        self.fleet.metrics()
    }

    /// The pools' limiters the workers pace calls by.
    pub fn pacer(&self) -> &RedisPacer {
        self.fleet.pacer()
    }

    /// The store runs are recorded in.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// The fleet's spend ledger the workers reserve priced calls in (docs/design.md §4.8).
    pub fn ledger(&self) -> &RedisLedger {
        self.fleet.ledger()
    }

    /// The Redis namespace (`FREEWAY_NAMESPACE`).
    pub fn namespace(&self) -> &str {
        self.fleet.namespace()
    }

    /// The shared Redis connection (never for blocking commands).
    pub fn connection(&self) -> RedisConnection {
        self.fleet.connection()
    }

    /// Enqueue a run for `request`: validate (a conversation of another user is not found),
    /// refuse while every route rests ([`RunRequest::on_rest`] is `refuse`: by default an
    /// interactive run's, never a batch run's), else record it (queued), publish `queued` and
    /// push it.
    pub async fn enqueue(&self, request: RunRequest) -> Result<Outcome, EnqueueError> {
        self.enqueue_retrying(request, None).await
    }

    /// [`Enqueuer::enqueue`] of a run that retries `retry_of`.
    pub(crate) async fn enqueue_retrying(
        &self,
        request: RunRequest,
        retry_of: Option<String>,
    ) -> Result<Outcome, EnqueueError> {
        let routes = request.validate(&self.catalog)?;
        if let Some(conversation) = &request.conversation_id {
            let owner = self.store.conversation_owner(conversation).await?;
            if owner.is_some_and(|owner| owner != request.user_id) {
                return Err(EnqueueError::ConversationNotFound(conversation.clone()));
            }
        }
        self.check_connections(&request.user_id, &routes).await?;
        // A resend answers the run its key names, even while every route rests.
        if let Some(key) = &request.idempotency_key
            && let Some(run_id) = self.store.keyed_run(&request.user_id, key).await?
            && let Some(outcome) = self.resent(&run_id).await?
        {
            return Ok(outcome);
        }
        let now = freeway::clock::epoch_ms();
        let job = RunJob {
            retry_of,
            ..RunJob::new(request, now)
        };
        if job.request.on_rest() == OnRest::Refuse {
            let mut closures = self.fleet.rests().closures(&routes).await?;
            let spender = Spender {
                request: &job.request,
                run_id: &job.run_id,
                spent_usd: 0.0,
                tokens: job.first_call_tokens(),
            };
            let (ledger, catalog) = (self.fleet.ledger(), &*self.catalog);
            close_capped_routes(ledger, catalog, &spender, &routes, &mut closures, now).await?;
            let decided = preflight::decide(
                &routes,
                &closures,
                job.deadline_ms,
                now,
                Waiting::NotAllowed,
            );
            if let Preflight::Refuse {
                code,
                retry_after_s,
            } = decided
            {
                return Ok(Outcome::Refused {
                    code,
                    retry_after_s,
                });
            }
        }
        for _ in 0..CLAIM_ATTEMPTS {
            match self.submit(&job).await? {
                Created::New => return Ok(Outcome::Enqueued { run_id: job.run_id }),
                Created::Existing(run_id) => {
                    if let Some(outcome) = self.resent(&run_id).await? {
                        return Ok(outcome);
                    }
                }
            }
        }
        Err(EnqueueError::KeyInFlight {
            key: job.request.idempotency_key.unwrap_or_default(),
            retry_after_s: CLAIM_GRACE_MS.div_ceil(1000),
        })
    }

    /// Answer the tool call `run_id` is paused on: enqueue its continuation (docs/design.md §2.4)
    /// and mark the run done with its part. Returns the continuation's run id.
    pub async fn approve(&self, run_id: &str, approval: Approval) -> Result<String, EnqueueError> {
        let parent = self
            .store
            .run(run_id)
            .await?
            .ok_or_else(|| EnqueueError::NotFound(run_id.to_string()))?;
        let call = awaited_call(&parent, &approval.tool_call_id)?;
        let parent_job = self.job(run_id).await?.ok_or_else(|| {
            EnqueueError::Conflict(format!(
                "run {run_id} is too old to continue: its job is no longer kept"
            ))
        })?;
        let result = approval.result.unwrap_or_else(|| {
            match approval.decision {
                Decision::Approve => APPROVED,
                Decision::Deny => DENIED,
            }
            .to_string()
        });
        let mut request = parent_job.request;
        request.conversation_id = Some(parent_job.conversation_id);
        request.idempotency_key = None;
        let now = freeway::clock::epoch_ms();
        let mut job = RunJob::new(request, now);
        job.continuation = Some(Continuation {
            parent_run_id: run_id.to_string(),
            tool_call: call.clone(),
            result: result.clone(),
        });
        job.check(&self.catalog)?;
        let claim = format!("{}:approval:{run_id}:{}", self.fleet.namespace(), call.id);
        if !self.claim(&claim, &job.run_id).await? {
            return Err(already_answered(run_id, &call));
        }
        let release = |e: EnqueueError| async {
            let mut conn = self.fleet.connection();
            let released: Result<(), _> = conn.del(&claim).await;
            if let Err(error) = released {
                tracing::warn!(%error, "cannot release an approval claim");
            }
            e
        };
        // The run's part is done, which the store decides in one step against a cancel racing
        // this approval: only the winner acts, so a cancelled run's continuation never runs.
        let answered = Transition {
            status: RunStatus::Succeeded,
            code: None,
            summary: None,
            now_ms: now,
        };
        let won = self
            .store
            .transition(run_id, &[RunStatus::AwaitingApproval], answered)
            .await;
        match won {
            Ok(true) => {}
            Ok(false) => {
                let now_is = self.store.run(run_id).await.ok().flatten();
                let status = now_is.map_or("gone", |r| r.status.as_str());
                let conflict = EnqueueError::Conflict(format!(
                    "run {run_id} is {status}, not awaiting approval"
                ));
                return Err(release(conflict).await);
            }
            Err(e) => return Err(release(e.into()).await),
        }
        if let Err(e) = self.submit(&job).await {
            // Awaiting again, as it was: the approval can be sent again.
            if let Err(error) = self.store.save_run(&parent).await {
                tracing::error!(run_id, %error, "approval failed and the run not put back awaiting it");
            }
            return Err(release(e).await);
        }
        // The continuation carries the conversation on; the approval keeps who was answered
        // what.
        let decided = Decided {
            decision: approval.decision,
            result,
            continuation_run_id: job.run_id.clone(),
            decided_ms: now,
        };
        if let Err(error) = self.store.record_decision(run_id, &call.id, &decided).await {
            // The continuation is queued and the claim stops a second one: report success.
            tracing::error!(run_id, %error, "continuation enqueued but the approval not recorded");
        }
        tracing::info!(run_id, continuation = %job.run_id, decision = ?approval.decision, "tool call answered");
        Ok(job.run_id)
    }

    /// The job of `run_id` as it was pushed: Redis's copy while the run is unsettled, then the
    /// store's.
    pub async fn job(&self, run_id: &str) -> Result<Option<RunJob>, EnqueueError> {
        let mut conn = self.fleet.connection();
        let mut bytes: Option<Vec<u8>> = conn.get(self.job_key(run_id)).await?;
        if bytes.is_none() {
            bytes = self.store.job(run_id).await?.map(String::into_bytes);
        }
        match bytes {
            None => Ok(None),
            Some(b) => match RunJob::from_json(&b, &self.catalog) {
                Ok((job, _)) => Ok(Some(job)),
                Err(error) => Err(EnqueueError::CorruptJob {
                    run_id: run_id.to_string(),
                    error,
                }),
            },
        }
    }

    /// A request whose idempotency key the run `run_id` holds: that run, once the request that
    /// recorded it has pushed it. A run still queued of which Redis keeps nothing is being
    /// pushed by that request, or was left by one that died half-way (a killed producer): this
    /// request waits for the push while the run is younger than [`CLAIM_GRACE_MS`], and pushes
    /// it itself after that, so a resend strands nothing and never makes a second run. `None`
    /// when the run is gone (its request failed and discarded it): the key is free again.
    async fn resent(&self, run_id: &str) -> Result<Option<Outcome>, EnqueueError> {
        let duplicate = Outcome::Duplicate {
            run_id: run_id.to_string(),
        };
        loop {
            let Some(run) = self.store.run(run_id).await? else {
                return Ok(None);
            };
            if run.status != RunStatus::Queued || !self.stranded(run_id).await? {
                return Ok(Some(duplicate));
            }
            let now = freeway::clock::epoch_ms();
            if now.saturating_sub(run.created_ms) >= CLAIM_GRACE_MS {
                // Its first delivery's key makes this push a no-op if the first one did land.
                if let Some(job) = self.job(run_id).await? {
                    self.push_and_keep(&job, now).await?;
                    tracing::warn!(
                        run_id,
                        "resent request found its run recorded but not kept in Redis: pushed it"
                    );
                }
                return Ok(Some(duplicate));
            }
            tokio::time::sleep(CLAIM_POLL).await;
        }
    }

    /// Whether Redis keeps nothing of a run: neither its job copy nor a lease.
    async fn stranded(&self, run_id: &str) -> Result<bool, EnqueueError> {
        let exists = vec![
            keyed("EXISTS", &self.job_key(run_id)),
            keyed("EXISTS", &self.fleet.leases().key(run_id)),
        ];
        let known: Vec<bool> = self.fleet.connection().each(exists).await?;
        Ok(!known.iter().any(|k| *k))
    }

    /// Record, announce and push a job that passed pre-flight, then keep its job copy. A
    /// failure before the push forgets the run again, so a request answered with an error
    /// leaves no run that would execute later. The order is what makes a killed producer
    /// harmless: a run is recorded before anything else, and its job copy (the reconciler's
    /// sign that Redis has the run) is written only once it is pushed, so a run recorded and
    /// never pushed has no copy, and the reconciler pushes it (docs/design.md §4.3).
    /// When another run holds the job's idempotency key, nothing is done and that run is the
    /// answer.
    async fn submit(&self, job: &RunJob) -> Result<Created, EnqueueError> {
        let now = freeway::clock::epoch_ms();
        if let Created::Existing(run_id) = self.store.create_queued(job, now).await? {
            return Ok(Created::Existing(run_id));
        }
        let announced = async {
            self.fleet
                .events()
                .publish(&job.run_id, &Event::Queued)
                .await?;
            self.queue.push(std::slice::from_ref(job)).await?;
            Ok::<(), EnqueueError>(())
        };
        if let Err(e) = announced.await {
            if let Err(error) = self.store.discard_queued(&job.run_id).await {
                tracing::error!(run_id = %job.run_id, %error, "a run that could not be enqueued stays recorded as queued");
            }
            return Err(e);
        }
        if let Err(error) = self.keep_job(job, now).await {
            // Pushed: it runs. Without its copy the reconciler may push it again once it is
            // stale, which its lease and stored counters make harmless.
            tracing::warn!(run_id = %job.run_id, %error, "run pushed but its job copy not kept");
        }
        Ok(Created::New)
    }

    /// Push a recorded run and keep its job copy, as [`Enqueuer::submit`] ends.
    async fn push_and_keep(&self, job: &RunJob, now: u64) -> Result<(), EnqueueError> {
        self.queue.push(std::slice::from_ref(job)).await?;
        self.keep_job(job, now).await
    }

    /// The job copy an approval reads back, and the reconciler's sign that Redis still knows the
    /// run: it lives until a day after the run's deadline.
    pub(crate) async fn keep_job(&self, job: &RunJob, now: u64) -> Result<(), EnqueueError> {
        let ttl_ms = job.deadline_ms.saturating_sub(now) + JOB_GRACE_MS;
        let payload = serde_json::to_vec(job).map_err(QueueError::from)?;
        let mut conn = self.fleet.connection();
        conn.pset_ex::<_, _, ()>(self.job_key(&job.run_id), payload, ttl_ms)
            .await?;
        Ok(())
    }

    /// Delivery `task_id` of `lane` is over: its apalis records go `keep` from now, and when it
    /// settled `settled_run` the run's job copy goes at once (the store keeps the job for a retry; a
    /// run awaiting an approval keeps its copy until the approval). One round trip.
    pub async fn delivered(
        &self,
        lane: usize,
        task_id: &str,
        settled_run: Option<&str>,
        keep: std::time::Duration,
    ) -> Result<(), EnqueueError> {
        let mut commands = vec![self.queue.retire_command(lane, task_id, keep)];
        if let Some(run_id) = settled_run {
            commands.push(keyed("DEL", &self.job_key(run_id)));
        }
        self.fleet
            .connection()
            .each::<redis::Value>(commands)
            .await?;
        Ok(())
    }

    /// Every user connection the chain names must be `user_id`'s, for the route's provider. The
    /// worker checks the owner again when it opens the key; this check makes a foreign or missing
    /// connection a 404 at once, with nothing written.
    async fn check_connections(&self, user_id: &str, routes: &[Route]) -> Result<(), EnqueueError> {
        for (i, route) in routes.iter().enumerate() {
            let Connection::User(id) = &route.connection else {
                continue;
            };
            match self.store.connection(id).await? {
                Some(info) if info.user_id == user_id => {
                    if info.provider != route.provider {
                        return Err(InvalidRequest {
                            field: format!("routes[{i}].provider"),
                            message: format!(
                                "connection {id} is for provider {:?}, not {:?}",
                                info.provider, route.provider
                            ),
                        }
                        .into());
                    }
                }
                _ => return Err(EnqueueError::ConnectionNotFound(id.clone())),
            }
        }
        Ok(())
    }

    /// `SET key value NX` for [`IDEMPOTENCY_TTL`]: whether this call set it.
    async fn claim(&self, key: &str, value: &str) -> Result<bool, EnqueueError> {
        let mut conn = self.fleet.connection();
        let set: Option<String> = redis::cmd("SET")
            .arg(key)
            .arg(value)
            .arg("NX")
            .arg("PX")
            .arg(IDEMPOTENCY_TTL.as_millis() as u64)
            .query_async(&mut conn)
            .await?;
        Ok(set.is_some())
    }

    pub(crate) fn job_key(&self, run_id: &str) -> String {
        format!("{}:job:{run_id}", self.fleet.namespace())
    }
}

/// The tool call `run` waits for, if it is `tool_call_id`.
fn awaited_call(run: &RunRecord, tool_call_id: &str) -> Result<ToolCall, EnqueueError> {
    match (&run.pending_tool_call, run.status) {
        (Some(call), RunStatus::AwaitingApproval) if call.id == tool_call_id => Ok(call.clone()),
        (Some(call), RunStatus::AwaitingApproval) => Err(EnqueueError::Conflict(format!(
            "run {} awaits approval of tool call {:?}, not {tool_call_id:?}",
            run.run_id, call.id
        ))),
        _ => Err(EnqueueError::Conflict(format!(
            "run {} is {}, not awaiting approval",
            run.run_id,
            run.status.as_str()
        ))),
    }
}

fn already_answered(run_id: &str, call: &ToolCall) -> EnqueueError {
    EnqueueError::Conflict(format!(
        "tool call {:?} of run {run_id} was already answered",
        call.id
    ))
}
