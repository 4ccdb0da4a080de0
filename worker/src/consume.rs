//! `worker`: take runs from the queue and execute them, with bounded concurrency, until SIGTERM
//! or SIGINT (docs/design.md §4).
//!
//! apalis does the taking, heartbeats and crash recovery; this module decides what a delivery
//! means. A job that cannot be read is dead-lettered at once (`invalid_job`, never retried); a
//! run that must wait is re-pushed to run later and the handler returns `Ok` (a snooze is not a
//! failure and must not spend apalis's 25 attempts); only infrastructure faults return `Err`.

use crate::payload::LenientJson;
use apalis::layers::limit::GlobalConcurrencyLimitLayer;
use apalis::prelude::*;
use apalis_core::backend::ext::with_codec::WithCodec;
use apalis_core::error::AbortError;
use freeway::canary::Canary;
use freeway::engine::{Engine, Outcome, WhenResting};
use freeway::job::RunJob;
use freeway::metrics::Metrics;
use queue::Reconciled;
use std::sync::Arc;
use std::time::Duration;
use tracing::{Instrument, debug, info, warn};

/// How often a replica wakes snoozed runs and promotes due jobs.
const TICK: Duration = Duration::from_millis(100);
/// How long a run granted a slot is looked for among the parked runs: it may be on its way to
/// its snooze when its turn comes.
const WAKE_TRIES: Duration = Duration::from_secs(2);
/// How often the records of deliveries retired long enough ago are deleted, and at most how
/// many a round: a replica deletes up to 5,000 a second, twice what it finishes at 5,000 in
/// flight, in rounds that hold Redis a few milliseconds.
const VACUUM_EVERY: Duration = Duration::from_secs(1);
const VACUUM_BATCH: usize = 5_000;
/// apalis polls for new jobs this often when the last fetch found none (its default is only on
/// heartbeat); while fetches bring jobs, it fetches again as soon as it has handed them out.
const POLL: Duration = Duration::from_millis(50);
/// The longest between two looks at the day rests; each rest's endpoint is read at its own
/// period, by one replica.
const DAY_WATCH_ROUND: Duration = Duration::from_secs(30);
/// The longest between two looks at the canaries; a canary runs within a round of its period's
/// end, or a quarter of its period when that is shorter.
const CANARY_ROUND: Duration = Duration::from_secs(30);

/// What every handler call shares.
pub(crate) struct App {
    pub engine: Engine,
    /// The one queue handle: its queue takes, snoozes, wakes and vacuums; it reconciles.
    pub enqueuer: queue::Enqueuer,
    /// The providers and pools in force, which a job's routes are read against.
    pub catalog: Arc<freeway::catalog::Catalog>,
    /// How often a reconcile round is due; a run is stale after two.
    pub reconcile: Duration,
    /// Lifts spent days early; its rounds run every [`DAY_WATCH_ROUND`] at most.
    pub day_watch: freeway::quota::DayWatch,
    /// The providers' canaries; a round runs every [`CANARY_ROUND`] at most.
    pub canaries: Vec<Canary>,
    /// This replica's store writer, probed for `/healthz`.
    pub writer: WriterProbe,
}

/// How long a writer probe may take before it counts as failed.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// Probes a replica's store writer and reports it to the fleet (docs/operations.md, health).
pub(crate) struct WriterProbe {
    pub store: freeway::store::SqlStore,
    pub health: queue::Health,
    pub replica: String,
}

impl WriterProbe {
    async fn probe(&self) {
        // A writer stuck on its disk (a file size limit, a hung mount) answers nothing: that is
        // a failure too, not a report that never comes.
        let probed = match tokio::time::timeout(PROBE_TIMEOUT, self.store.check_writable()).await {
            Ok(written) => written.map_err(|e| e.to_string()),
            Err(_) => Err(format!(
                "the store writer did not answer within {} s",
                PROBE_TIMEOUT.as_secs()
            )),
        };
        if let Err(error) = &probed {
            warn!(%error, "this replica's store writer fails: /healthz reports it");
        }
        if let Err(error) = self.health.report_writer(&self.replica, probed).await {
            warn!(%error, "cannot report the store writer's health");
        }
    }
}

/// The canaries the catalog calls for, saying which providers have none and why.
pub(crate) fn canaries(catalog: &freeway::catalog::Catalog) -> Vec<Canary> {
    let (canaries, without) = freeway::canary::plan(catalog);
    for provider in without {
        info!(%provider, "no canary: none of the provider's pools names a model without a pattern");
    }
    canaries
}

/// Why a job was dead-lettered: shown as the task's result in apalis's record.
#[derive(Debug, thiserror::Error)]
#[error("invalid_job: {0}")]
struct InvalidJob(String);

/// Handle one delivery, then retire it: a delivery that ended (the run settled or parked, or
/// the job was dead-lettered) has its apalis records vacuumed after a while; one that failed
/// for the fleet's fault is apalis's to retry.
async fn handle(
    payload: serde_json::Value,
    app: Arc<App>,
    lane: usize,
    id: TaskId,
) -> Result<String, BoxDynError> {
    let taken = std::time::Instant::now();
    let (result, settled_run) = deliver(payload, &app, &id).await;
    let keep = match &result {
        Ok(_) => Some(queue::schedule::KEEP_DELIVERED),
        Err(e) if e.downcast_ref::<AbortError>().is_some() => Some(queue::schedule::KEEP_DEAD),
        Err(_) => None,
    };
    if let Some(keep) = keep
        && let Err(e) = app
            .enqueuer
            .delivered(lane, &id.to_string(), settled_run.as_deref(), keep)
            .await
    {
        warn!(task = %id, error = %e, "could not retire the delivery; apalis's records of it stay in Redis");
    }
    let held_ms = u64::try_from(taken.elapsed().as_millis()).unwrap_or(u64::MAX);
    app.enqueuer
        .fleet()
        .metrics()
        .add(freeway::metrics::delivery(held_ms))
        .await;
    result
}

/// The delivery's result, and the run it settled, if it did.
async fn deliver(
    payload: serde_json::Value,
    app: &App,
    id: &TaskId,
) -> (Result<String, BoxDynError>, Option<String>) {
    if let Some(reason) = crate::payload::undecodable(&payload) {
        warn!(task = %id, %reason, "dead-lettering an undecodable job");
        return (
            Err(AbortError::new(InvalidJob(reason.to_string())).into()),
            None,
        );
    }
    let named = payload
        .get("run_id")
        .and_then(|v| v.as_str())
        .map(str::to_string);
    let (job, routes) = match RunJob::from_value(payload, &app.catalog) {
        Ok(parsed) => parsed,
        Err(e) => {
            warn!(task = %id, reason = %e, "dead-lettering an invalid job");
            let ended = match named.filter(|r| freeway::job::is_id(r)) {
                // The run it names ends too if its stored job is as unreadable: it can never run.
                Some(run_id) => match app.enqueuer.end_if_unreadable(&run_id).await {
                    Ok(true) => Some(run_id),
                    Ok(false) => None,
                    Err(error) => {
                        warn!(%run_id, %error, "could not end the run of a dead-lettered job");
                        None
                    }
                },
                None => None,
            };
            return (
                Err(AbortError::new(InvalidJob(e.to_string())).into()),
                ended,
            );
        }
    };
    let span = tracing::info_span!("run", run_id = %job.run_id, user_id = %job.request.user_id, snooze_n = job.snooze_n);
    freeway::telemetry::continue_trace(&span, job.traceparent.as_deref());
    if job.snooze_n == 0 {
        let now = freeway::clock::epoch_ms();
        freeway::telemetry::past_span(&span, "queue_wait", job.enqueued_ms, now);
    }
    match settle(app, &job, &routes).instrument(span).await {
        Ok((label, true)) => (Ok(label), Some(job.run_id)),
        Ok((label, false)) => (Ok(label), None),
        Err(e) => (Err(e), None),
    }
}

/// Execute a run and act on how it ended; the label apalis keeps as the delivery's result, and
/// whether the run settled.
async fn settle(
    app: &App,
    job: &RunJob,
    routes: &[freeway::route::Route],
) -> Result<(String, bool), BoxDynError> {
    let outcome = app.engine.execute(job, routes, WhenResting::Snooze).await?;
    let settled = matches!(
        outcome,
        Outcome::Finished { .. } | Outcome::Refused { .. } | Outcome::Skipped(_)
    );
    let label = act_on(app, job, outcome).await?;
    Ok((label, settled))
}

/// Park a run that must wait, log how a run ended; the delivery's result label.
async fn act_on(app: &App, job: &RunJob, outcome: Outcome) -> Result<String, BoxDynError> {
    match outcome {
        Outcome::Snoozed {
            until_ms,
            reason,
            slot,
        } => {
            let held = slot.is_some();
            park(
                app,
                &RunJob {
                    slot,
                    ..job.clone()
                },
                until_ms,
            )
            .await?;
            info!(until_ms, %reason, held, "snoozed");
            Ok("snoozed".into())
        }
        Outcome::Busy { retry_after } => {
            // Another delivery is executing the run: look again when its lease would lapse.
            let until_ms = freeway::clock::epoch_ms() + retry_after.as_millis() as u64;
            park(app, job, until_ms).await?;
            info!(until_ms, "another delivery holds the run: parked");
            Ok("busy".into())
        }
        Outcome::Invalid(reason) => {
            warn!(%reason, "dead-lettering an invalid job");
            Err(AbortError::new(InvalidJob(reason)).into())
        }
        Outcome::Skipped(status) => {
            info!(status = status.as_str(), "already settled: skipped");
            Ok("skipped".into())
        }
        Outcome::Refused {
            code,
            retry_after_s,
        } => {
            info!(code = code.as_str(), retry_after_s, "refused");
            Ok("refused".into())
        }
        Outcome::AwaitingApproval(call) => {
            info!(tool = %call.name, "awaiting approval");
            Ok("awaiting_approval".into())
        }
        Outcome::Finished { status, code } => {
            info!(
                status = status.as_str(),
                code = code.map(|c| c.as_str()),
                "finished"
            );
            Ok("finished".into())
        }
    }
}

/// Re-push the run to run at `until_ms` (a snooze is a new delivery, never an apalis retry).
async fn park(app: &App, job: &RunJob, until_ms: u64) -> Result<(), queue::QueueError> {
    let mut next = job.clone();
    next.snooze_n += 1;
    app.enqueuer.queue().snooze(&next, until_ms).await
}

/// Polls apalis for new jobs at a fixed interval. apalis-core 1.0.0's own `IntervalStrategy`
/// arms its next timer without polling it, so after an empty fetch an idle worker sleeps until
/// its next heartbeat (seconds); this strategy polls the new tick at once so its timer is armed.
struct Ticks(tokio::time::Interval);

impl Ticks {
    fn every(period: Duration) -> Ticks {
        let mut interval = tokio::time::interval(period);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        Ticks(interval)
    }
}

impl apalis_core::backend::ext::poll_strategy::PollStrategy for Ticks {
    fn poll_drive(
        &mut self,
        cx: &mut std::task::Context<'_>,
        _: &apalis_core::backend::ext::poll_strategy::PollSnapshot,
    ) -> std::task::Poll<Option<()>> {
        match self.0.poll_tick(cx) {
            std::task::Poll::Ready(_) => {
                // Registers the waker for the next tick; it is never ready this soon.
                let _ = self.0.poll_tick(cx);
                std::task::Poll::Ready(Some(()))
            }
            std::task::Poll::Pending => std::task::Poll::Pending,
        }
    }
}

/// Run the queue worker until a shutdown signal; `grace` bounds the wait for running jobs.
pub(crate) async fn run(app: Arc<App>, concurrency: usize, grace: Duration) -> Result<(), String> {
    let name = replica_name();
    // The replica's slots: its lanes' workers share them, and each fetch is sized to those free
    // (queue::schedule::FETCH_MOST, FETCH_BATCH).
    let slots = Arc::new(tokio::sync::Semaphore::new(concurrency));
    let storages = app.enqueuer.queue().storages(&slots, concurrency);
    // Before taking anything, move due jobs in chunks: a backlog that piled up while no worker
    // ran must not reach apalis's fetch in one piece.
    app.enqueuer
        .queue()
        .promote_due()
        .await
        .map_err(|e| e.to_string())?;
    let ticker = tokio::spawn(tick(app.clone()));
    // One apalis worker a lane, all under the replica's name (each lane has its own workers
    // set) and sharing its `concurrency` slots.
    let mut monitor = Monitor::new();
    for (lane, storage) in storages.into_iter().enumerate() {
        let name = name.clone();
        let app = app.clone();
        let slots = slots.clone();
        monitor = monitor.register(move |restarts| {
            // apalis needs a new name after a restart; the first keeps the replica's own.
            let worker = match restarts {
                0 => name.clone(),
                n => format!("{name}-r{n}"),
            };
            WorkerBuilder::new(worker)
                .backend(WithCodec::new(
                    storage.clone().poll_with_strategy(Ticks::every(POLL)),
                    LenientJson,
                ))
                .catch_panic()
                // Handlers run on the runtime's threads, not all on the worker's one task.
                .parallelize(tokio::spawn)
                .layer(GlobalConcurrencyLimitLayer::with_semaphore(slots.clone()))
                // The handler holds the app itself: apalis's `.data()` would copy each task's
                // context (its metadata map, some 60 strings) to add it.
                .build({
                    let app = app.clone();
                    move |payload, id| handle(payload, app.clone(), lane, id)
                })
        });
    }
    let monitor = monitor
        // A Redis hiccup kills the apalis worker; come back rather than idle without workers.
        .should_restart(|ctx, err| {
            warn!(worker = %ctx.name(), error = %err, "worker stopped; restarting");
            true
        })
        .shutdown_timeout(grace);
    let _file_size_limit = freeway::store::survive_file_size_limit();
    info!(concurrency, "worker started");
    let result = monitor.run_with_signal(shutdown_signal()).await;
    ticker.abort();
    let handed_back = app.engine.release_leases().await;
    if handed_back > 0 {
        info!(
            runs = handed_back,
            "handed back the leases of runs still running at the end of the grace: another replica takes them at once"
        );
    }
    app.engine.flush_metrics().await;
    info!("worker stopped");
    result.map_err(|e| e.to_string())
}

/// The replica's housekeeping: write held-back counts, wake snoozed runs, promote due jobs,
/// vacuum retired deliveries, and take its turn at reconciling the store with Redis, at reading
/// quota endpoints and at sending the providers' canaries.
async fn tick(app: Arc<App>) {
    let mut last_vacuum = tokio::time::Instant::now();
    let mut last_reconcile = tokio::time::Instant::now();
    let mut last_probe = tokio::time::Instant::now();
    let day_watch_round = app.day_watch.period().min(DAY_WATCH_ROUND);
    // The first look is at once: a day already spent elsewhere must close before a call finds it.
    let mut last_day_watch = tokio::time::Instant::now()
        .checked_sub(day_watch_round)
        .unwrap_or_else(tokio::time::Instant::now);
    let canary_round = app
        .canaries
        .iter()
        .map(|c| c.every / 4)
        .fold(CANARY_ROUND, Duration::min);
    // The first round starts the fleet's first period (no call): at once, like the day watch.
    let mut last_canaries = tokio::time::Instant::now()
        .checked_sub(canary_round)
        .unwrap_or_else(tokio::time::Instant::now);
    // Runs granted a slot that were not parked yet when told (they were on their way to their
    // snooze): told again each tick until their slot would be over.
    let mut to_wake: Vec<(String, tokio::time::Instant)> = Vec::new();
    loop {
        tokio::time::sleep(TICK).await;
        app.engine.flush_metrics().await;
        let now = freeway::clock::epoch_ms();
        wake_turns(&app, &mut to_wake, now).await;
        if let Err(e) = app
            .enqueuer
            .queue()
            .wake_due(now, queue::schedule::CHUNK)
            .await
        {
            warn!(error = %e, "waking snoozed runs failed");
        }
        if let Err(e) = app.enqueuer.queue().promote_due().await {
            warn!(error = %e, "promoting due jobs failed");
        }
        if last_reconcile.elapsed() >= app.reconcile {
            last_reconcile = tokio::time::Instant::now();
            match app
                .enqueuer
                .reconcile(app.reconcile * 2, app.reconcile)
                .await
            {
                Ok(Some(done)) if done != Reconciled::default() => info!(
                    pushed = done.pushed,
                    ended = done.ended,
                    "reconciled: pushed runs Redis had lost, ended runs that cannot be read"
                ),
                Ok(_) => {}
                Err(e) => warn!(error = %e, "reconciling failed"),
            }
        }
        if last_day_watch.elapsed() >= day_watch_round {
            last_day_watch = tokio::time::Instant::now();
            watch_days(&app).await;
        }
        if last_canaries.elapsed() >= canary_round {
            last_canaries = tokio::time::Instant::now();
            if let Err(e) = app.engine.canaries(&app.canaries).await {
                warn!(error = %e, "the canary round failed");
            }
        }
        if last_probe.elapsed() >= queue::health::PROBE_EVERY {
            last_probe = tokio::time::Instant::now();
            app.writer.probe().await;
        }
        if last_vacuum.elapsed() >= VACUUM_EVERY {
            last_vacuum = tokio::time::Instant::now();
            match app.enqueuer.queue().vacuum(now, VACUUM_BATCH).await {
                Ok(0) => {}
                Ok(n) => debug!(deleted = n, "vacuumed finished deliveries"),
                Err(e) => warn!(error = %e, "vacuum failed"),
            }
        }
    }
}

/// Hand out the slots of pools whose runs wait their turn, and wake the runs they went to
/// (docs/design.md §4.7).
async fn wake_turns(app: &App, to_wake: &mut Vec<(String, tokio::time::Instant)>, now: u64) {
    match app.engine.dispatch_turns().await {
        Ok(granted) => {
            let until = tokio::time::Instant::now() + WAKE_TRIES;
            to_wake.extend(granted.into_iter().map(|run| (run, until)));
        }
        Err(e) => warn!(error = %e, "handing out slots to waiting runs failed"),
    }
    let mut left = Vec::new();
    for (run_id, until) in to_wake.drain(..) {
        match app.enqueuer.queue().wake(&run_id, now).await {
            Ok(true) => debug!(%run_id, "woke a run whose turn came"),
            Ok(false) if tokio::time::Instant::now() < until => left.push((run_id, until)),
            Ok(false) => {
                debug!(%run_id, "a run whose turn came was not parked; it comes at its own time")
            }
            Err(e) => {
                warn!(%run_id, error = %e, "waking a run whose turn came failed");
                left.push((run_id, until));
            }
        }
    }
    *to_wake = left;
}

/// A day rest the quota endpoint lifted delayed runs until midnight: wake them now.
async fn watch_days(app: &App) {
    let lifted = match app.day_watch.round().await {
        Ok(lifted) => lifted,
        Err(e) => return warn!(error = %e, "reading the day rests failed"),
    };
    if lifted.is_empty() {
        return;
    }
    match app
        .enqueuer
        .queue()
        .wake_parked(freeway::clock::epoch_ms())
        .await
    {
        Ok(n) => info!(woken = n, "woke parked runs after lifting a day rest"),
        Err(e) => warn!(error = %e, "waking parked runs failed; they wake at their time"),
    }
}

/// SIGTERM or SIGINT.
async fn shutdown_signal() -> std::io::Result<()> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        r = tokio::signal::ctrl_c() => r?,
        _ = term.recv() => {}
    }
    info!("shutdown signal: finishing running jobs");
    Ok(())
}

/// The replica's one name, `{host}-{pid}`: the board's workers list, its runs' `started` events
/// and its logs all say it.
pub(crate) fn replica_name() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "worker".to_string());
    format!("{host}-{}", std::process::id())
}
