//! `worker run-one JOB.json`: one run without the queue (docs/api.md §2).
//!
//! The same pre-flight and engine as the queue, but where the queue would snooze it refuses with
//! `retry_after_s`. Each event is printed as one JSON line on stdout (and published to the run's
//! Redis stream as usual); the last line is the `finished` or `refused` event.
//!
//! The run is recorded in the store of `DATABASE_URL` (migrated on open), and a route on a user's
//! connection uses the key stored there, opened with `FREEWAY_SECRET_KEY`. A malformed
//! `DATABASE_URL` exits 2 (bad configuration); a database that cannot be opened exits 1.

use async_trait::async_trait;
use freeway::clock::{Clock, SystemClock};
use freeway::config::Settings;
use freeway::engine::{Outcome, WhenResting};
use freeway::events::{Event, EventError, EventSink};
use freeway::job::{RunJob, RunRequest};
use freeway::run::RunStatus;
use std::io::Read;
use std::process::ExitCode;
use std::sync::Arc;

use crate::exit::{
    BAD_INPUT as EXIT_BAD_INPUT, FAILED as EXIT_FAILED, REFUSED as EXIT_REFUSED, fail,
};

/// Prints every event as a JSON line, then hands it on.
struct PrintingEvents(Arc<dyn EventSink>);

#[async_trait]
impl EventSink for PrintingEvents {
    async fn publish(&self, run_id: &str, event: &Event) -> Result<(), EventError> {
        println!("{}", event.to_json());
        self.0.publish(run_id, event).await
    }
}

pub(crate) fn main(path: &str) -> ExitCode {
    let settings = match Settings::from_env() {
        Ok(s) => s,
        Err(e) => return fail(EXIT_BAD_INPUT, &format!("bad configuration: {e}")),
    };
    let _telemetry = match freeway::logging::init(settings.log_format, "freeway-worker") {
        Ok(t) => t,
        Err(e) => return fail(EXIT_BAD_INPUT, &format!("bad configuration: {e}")),
    };
    let bytes = match read_job(path) {
        Ok(b) => b,
        Err(e) => return fail(EXIT_BAD_INPUT, &format!("cannot read {path}: {e}")),
    };
    let request = match RunRequest::from_json(&bytes, &settings.catalog) {
        Ok(r) => r,
        Err(e) => return fail(EXIT_BAD_INPUT, &format!("invalid job: {e}")),
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => return fail(EXIT_FAILED, &format!("cannot start the runtime: {e}")),
    };
    runtime.block_on(run(settings, request))
}

async fn run(settings: Settings, request: RunRequest) -> ExitCode {
    let worker = format!("run-one-{}", std::process::id());
    let events = |fleet_events| Arc::new(PrintingEvents(fleet_events)) as Arc<dyn EventSink>;
    let engine = match crate::wiring::engine(&settings, worker, 1, events).await {
        Ok(w) => w.engine,
        Err(e) => return crate::exit::start_failed(&e),
    };
    let job = RunJob::new(request, SystemClock.now_ms());
    let routes = match job.check(&settings.catalog) {
        Ok(r) => r,
        Err(e) => return fail(EXIT_BAD_INPUT, &format!("invalid job: {e}")),
    };
    let executed = engine.execute(&job, &routes, WhenResting::Refuse).await;
    engine.flush_metrics().await;
    match executed {
        Ok(
            Outcome::Finished {
                status: RunStatus::Succeeded,
                ..
            }
            | Outcome::AwaitingApproval(_),
        ) => ExitCode::SUCCESS,
        Ok(Outcome::Refused { .. } | Outcome::Snoozed { .. }) => ExitCode::from(EXIT_REFUSED),
        Ok(Outcome::Invalid(why)) => fail(EXIT_BAD_INPUT, &format!("invalid job: {why}")),
        Ok(Outcome::Finished { .. } | Outcome::Skipped(_) | Outcome::Busy { .. }) => {
            ExitCode::from(EXIT_FAILED)
        }
        Err(e) => fail(EXIT_FAILED, &e.to_string()),
    }
}

fn read_job(path: &str) -> std::io::Result<Vec<u8>> {
    if path == "-" {
        let mut buf = Vec::new();
        std::io::stdin().read_to_end(&mut buf)?;
        Ok(buf)
    } else {
        std::fs::read(path)
    }
}
