//! The reconciler a worker runs (docs/design.md §4.3): Redis is only the schedule, the store is
//! the record, so one replica a round pushes again every run the store has as queued, delayed or
//! running that Redis forgot (a restart without its data, a failover, a producer that died
//! between recording and pushing), and ends the runs whose stored job can never be read.

use crate::enqueue::{EnqueueError, Enqueuer, RECONCILE_BATCH, RECONCILE_PAGES, Reconciled};
use freeway::connect::keyed;
use freeway::events::{Event, EventSink};
use freeway::job::{InvalidRequest, RunJob};
use freeway::lease::Leases;
use freeway::run::{Code, RunStatus};
use freeway::store::{Transition, UnsettledCursor, UnsettledJob};
use redis::AsyncCommands;

/// How long a running run must go untouched, at least, before the reconciler pushes it again:
/// two lease lifetimes, so its executor, if alive, has renewed (or taken back) its lease many
/// times over.
const RUNNING_STALE: std::time::Duration =
    std::time::Duration::from_secs(2 * freeway::lease::LEASE_TTL.as_secs());
/// How long a round's cursor waits for the next round; past it the next starts over.
const CURSOR_TTL_MS: u64 = 3_600_000;

/// A cursor as a round left it: `updated_ms run_id`.
fn read_cursor(text: &str) -> Option<UnsettledCursor> {
    let (ms, run_id) = text.split_once(' ')?;
    Some(UnsettledCursor {
        updated_ms: ms.parse().ok()?,
        run_id: run_id.to_string(),
    })
}

impl Enqueuer {
    /// The reconciler, one replica a round: push again every run the store has as queued,
    /// delayed or running, untouched for `stale`, of which Redis keeps neither the job copy nor
    /// a lease — Redis lost it (a restart without its data, a failover), or a producer died
    /// between recording and pushing it. A run whose stored job does not read back can never
    /// run: it ends `failed` `invalid_job`. The round is claimed with a lock that lasts `round`;
    /// `None` when another replica has it. A round reads at most [`RECONCILE_PAGES`] pages and
    /// leaves a cursor in Redis where it stopped, so no number of runs it cannot act on blinds
    /// it to the ones after. A run pushed twice is still executed once: the lease and the stored
    /// counters keep it within its budget.
    pub async fn reconcile(
        &self,
        stale: std::time::Duration,
        round: std::time::Duration,
    ) -> Result<Option<Reconciled>, EnqueueError> {
        if !self.fleet.leases().take_turn("reconciler", round).await? {
            return Ok(None);
        }
        let mut conn = self.fleet.connection();
        let now = freeway::clock::epoch_ms();
        let before = now.saturating_sub(stale.as_millis() as u64);
        // A running run's lease may be gone only because Redis forgot it; its executor takes it
        // back at its next renewal. Pushing it before then would pay for its call twice.
        let running_stale = stale.max(RUNNING_STALE);
        let running_before = now.saturating_sub(running_stale.as_millis() as u64);
        let cursor_key = format!("{}:reconcile:cursor", self.fleet.namespace());
        let saved: Option<String> = conn.get(&cursor_key).await?;
        let mut after = saved.as_deref().and_then(read_cursor);
        let mut done = Reconciled::default();
        for _ in 0..RECONCILE_PAGES {
            let page = self
                .store
                .unsettled_jobs(before, running_before, after.as_ref(), RECONCILE_BATCH)
                .await?;
            let full = page.len() == RECONCILE_BATCH as usize;
            after = page.last().map(UnsettledJob::cursor);
            self.reconcile_page(page, now, &mut done).await?;
            if !full {
                after = None;
                break;
            }
        }
        match &after {
            Some(c) => {
                let text = format!("{} {}", c.updated_ms, c.run_id);
                conn.pset_ex::<_, _, ()>(&cursor_key, text, CURSOR_TTL_MS)
                    .await?
            }
            None => conn.del::<_, ()>(&cursor_key).await?,
        }
        Ok(Some(done))
    }

    /// One page of a reconcile round: end the runs whose job is unreadable, push the lost ones.
    async fn reconcile_page(
        &self,
        page: Vec<UnsettledJob>,
        now: u64,
        done: &mut Reconciled,
    ) -> Result<(), EnqueueError> {
        let mut jobs = Vec::with_capacity(page.len());
        for unsettled in page {
            match RunJob::from_json(unsettled.job.as_bytes(), &self.catalog) {
                Ok((job, _)) => jobs.push(job),
                Err(error) => {
                    if self.end_unreadable(&unsettled.run_id, &error).await? {
                        done.ended += 1;
                    }
                }
            }
        }
        if jobs.is_empty() {
            return Ok(());
        }
        let exists = jobs
            .iter()
            .flat_map(|job| {
                [
                    keyed("EXISTS", &self.job_key(&job.run_id)),
                    keyed("EXISTS", &self.fleet.leases().key(&job.run_id)),
                ]
            })
            .collect();
        let known: Vec<bool> = self.fleet.connection().each(exists).await?;
        let lost = jobs
            .into_iter()
            .zip(known.chunks(2))
            .filter(|(_, known)| !known.iter().any(|k| *k))
            .map(|(job, _)| job);
        for job in lost {
            self.keep_job(&job, now).await?;
            self.queue.repush(&job).await?;
            done.pushed += 1;
            tracing::warn!(run_id = %job.run_id, "Redis kept nothing of this run: pushed it again from the store");
        }
        Ok(())
    }

    /// End a run that can never run because the job it was enqueued as does not read back:
    /// `failed` `invalid_job`, with the reason. Only the store's own copy of the job decides, so
    /// a queue entry that merely names a run cannot end it. Says whether it ended the run.
    pub async fn end_unreadable(
        &self,
        run_id: &str,
        error: &InvalidRequest,
    ) -> Result<bool, EnqueueError> {
        let reason = freeway::text::cut(&format!("its job does not read back: {error}"), 512);
        let ended = self
            .store
            .transition(
                run_id,
                &[RunStatus::Queued, RunStatus::Delayed, RunStatus::Running],
                Transition {
                    status: RunStatus::Failed,
                    code: Some(Code::InvalidJob),
                    summary: Some(&reason),
                    now_ms: freeway::clock::epoch_ms(),
                },
            )
            .await?;
        if ended {
            let failed = Event::Finished {
                status: RunStatus::Failed,
                code: Some(Code::InvalidJob),
                usage: Default::default(),
            };
            if let Err(error) = self.fleet.events().publish(run_id, &failed).await {
                tracing::warn!(run_id, %error, "ended a run whose job is unreadable, without its event");
            }
            tracing::warn!(run_id, %reason, "ended a run whose job cannot be read: invalid_job");
        }
        Ok(ended)
    }

    /// A dead-lettered queue entry that names `run_id`: end that run if the store's copy of its
    /// job is unreadable too (it can never run); leave it be otherwise.
    pub async fn end_if_unreadable(&self, run_id: &str) -> Result<bool, EnqueueError> {
        let Some(text) = self.store.job(run_id).await? else {
            return Ok(false);
        };
        match RunJob::from_json(text.as_bytes(), &self.catalog) {
            Ok(_) => Ok(false),
            Err(error) => self.end_unreadable(run_id, &error).await,
        }
    }
}
