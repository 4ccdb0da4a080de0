//! `worker` without a command: the queue worker. It reads the settings, wires the engine, the
//! queue and the housekeeping to one Redis connection and one store, and consumes runs until a
//! signal asks it to stop (docs/design.md §4.3).

use crate::{consume, exit, wiring};
use freeway::logging;
use std::process::ExitCode;

/// How `worker` serves the queue.
pub(crate) struct Serve {
    pub concurrency: usize,
    pub grace: std::time::Duration,
    pub heartbeat: std::time::Duration,
    pub reconcile: std::time::Duration,
    pub quota_check: std::time::Duration,
}

/// `worker`: the queue worker.
pub(crate) fn main(
    Serve {
        concurrency,
        grace,
        heartbeat,
        reconcile,
        quota_check,
    }: Serve,
) -> ExitCode {
    let settings = match freeway::config::Settings::from_env() {
        Ok(s) => s,
        Err(e) => return exit::fail(exit::BAD_INPUT, &format!("bad configuration: {e}")),
    };
    let _telemetry = match logging::init(settings.log_format, "freeway-worker") {
        Ok(t) => t,
        Err(e) => return exit::fail(exit::BAD_INPUT, &format!("bad configuration: {e}")),
    };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => return exit::fail(exit::FAILED, &format!("cannot start the runtime: {e}")),
    };
    runtime.block_on(async move {
        let name = consume::replica_name();
        let wired = match wiring::engine(&settings, name, concurrency, |events| events).await {
            Ok(w) => w,
            Err(e) => return exit::start_failed(&e),
        };
        let enqueuer = queue::Enqueuer::on(wired.redis.clone(), wired.engine.store().clone())
            .with_catalog(settings.catalog.clone())
            .with_lanes(settings.queues)
            .with_heartbeat(heartbeat);
        let health = queue::Health::new(wired.redis.connection(), wired.redis.namespace());
        let app = std::sync::Arc::new(consume::App {
            writer: consume::WriterProbe {
                store: wired.store,
                health,
                replica: consume::replica_name(),
            },
            engine: wired.engine,
            enqueuer,
            catalog: settings.catalog.clone(),
            reconcile,
            day_watch: wired.day_watch.every(quota_check),
            canaries: consume::canaries(&settings.catalog),
        });
        match consume::run(app, concurrency, grace).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => exit::fail(exit::FAILED, &e),
        }
    })
}
