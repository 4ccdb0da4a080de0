//! What a run writes: its record and the writes waiting for it, saved all or none; its events;
//! its end. When the store does not take a save, the writes are kept in Redis for the run's next
//! delivery, which stores them before anything else rather than pay again for an answer it has.

use super::{Engine, EngineError, Outcome, Run};
use crate::chat::Message;
use crate::events::Event;
use crate::run::{Code, RunRecord, RunStatus};
use crate::store::Attached;
use tracing::Instrument;

/// A save the store did not take, as [`crate::unsaved`] keeps it.
#[derive(serde::Serialize, serde::Deserialize)]
struct PendingSave {
    run: RunRecord,
    writes: Vec<Attached>,
}

/// How long kept writes outlive their run's deadline.
const UNSAVED_GRACE_MS: u64 = 24 * 3600 * 1000;

impl Engine {
    pub(crate) async fn finish(
        &self,
        run: &mut Run<'_>,
        status: RunStatus,
        code: Option<Code>,
    ) -> Result<Outcome, EngineError> {
        run.rec.status = status;
        run.rec.code = code;
        if status == RunStatus::Failed && !run.rec.output.is_empty() {
            run.rec.incomplete = true;
        }
        self.save(run).await?;
        let event = Event::Finished {
            status,
            code,
            usage: run.rec.usage,
        };
        self.publish(run, event).await?;
        Ok(Outcome::Finished { status, code })
    }

    /// End a run that `by` cancelled while it ran.
    pub(super) async fn cancelled(
        &self,
        run: &mut Run<'_>,
        by: String,
    ) -> Result<Outcome, EngineError> {
        run.rec.status = RunStatus::Cancelled;
        run.rec.code = None;
        self.save(run).await?;
        self.publish(run, Event::Cancelled { by: Some(by) }).await?;
        Ok(Outcome::Finished {
            status: RunStatus::Cancelled,
            code: None,
        })
    }

    /// Save the run with the writes waiting for it ([`Run::unsaved`]), all or none.
    pub(crate) async fn save(&self, run: &mut Run<'_>) -> Result<(), EngineError> {
        run.rec.updated_ms = self.clock.now_ms();
        let unsaved = std::mem::take(&mut run.unsaved);
        let span = tracing::info_span!("store_write", writes = unsaved.len());
        match self
            .store
            .save_run_with(&run.rec, &unsaved)
            .instrument(span)
            .await
        {
            Ok(()) => Ok(()),
            Err(e) => {
                self.keep_unsaved(run, unsaved).await;
                Err(e.into())
            }
        }
    }

    /// A save failed: keep its writes for the run's next delivery (`crate::unsaved`), which
    /// stores them before anything else rather than pay for an answer it already has.
    async fn keep_unsaved(&self, run: &Run<'_>, writes: Vec<Attached>) {
        let save = PendingSave {
            run: run.rec.clone(),
            writes,
        };
        let kept = match serde_json::to_string(&save) {
            Ok(json) => {
                let ttl_ms =
                    run.job.deadline_ms.saturating_sub(self.clock.now_ms()) + UNSAVED_GRACE_MS;
                let ttl = std::time::Duration::from_millis(ttl_ms);
                self.fleet
                    .unsaved
                    .keep(&run.rec.run_id, &json, ttl)
                    .await
                    .map_err(|e| e.to_string())
            }
            Err(e) => Err(e.to_string()),
        };
        match kept {
            Ok(()) => {
                tracing::warn!(run_id = %run.rec.run_id, "the store did not take the run's save: its writes are kept for its next delivery")
            }
            Err(error) => {
                tracing::error!(run_id = %run.rec.run_id, %error, "the store did not take the run's save, nor Redis its writes")
            }
        }
    }

    /// Store what an earlier delivery of `run_id` could not, before the run is read.
    pub(super) async fn recover_unsaved(&self, run_id: &str) -> Result<(), EngineError> {
        let Some(json) = self.fleet.unsaved.kept(run_id).await? else {
            return Ok(());
        };
        match serde_json::from_str::<PendingSave>(&json) {
            Ok(save) if save.run.run_id == run_id => {
                self.store.save_run_with(&save.run, &save.writes).await?;
                tracing::info!(
                    run_id,
                    writes = save.writes.len(),
                    "stored what the run's last delivery could not"
                );
            }
            Ok(_) | Err(_) => {
                tracing::warn!(run_id, "kept writes of this run do not read back; dropped");
            }
        }
        self.fleet.unsaved.clear(run_id).await?;
        Ok(())
    }

    /// The conversation as this run sees it: what is stored, then its own unsaved messages.
    pub(crate) async fn transcript(&self, run: &mut Run<'_>) -> Result<Vec<Message>, EngineError> {
        let mut transcript = match run.stored_transcript.take() {
            Some(read_with_the_run) => read_with_the_run,
            None => self.store.transcript(&run.job.conversation_id).await?,
        };
        transcript.extend(run.unsaved.iter().filter_map(|u| match u {
            Attached::Message { message, .. } => Some(message.clone()),
            Attached::Attempt(_) | Attached::Decision { .. } => None,
        }));
        Ok(transcript)
    }

    pub(crate) async fn publish(&self, run: &mut Run<'_>, event: Event) -> Result<(), EngineError> {
        if event.is_output() {
            run.rec.state.emitted = true;
        }
        Ok(self.fleet.events.publish(&run.rec.run_id, &event).await?)
    }
}
