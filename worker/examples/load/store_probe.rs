//! The store alone: the store calls of a one-step chat run, without Redis, HTTP or apalis, from
//! one process at the replica's concurrency. Its rate is the ceiling the store puts on a replica,
//! the figure to hold the pipeline's rate against.
//!
//! The sequence copies what the engine does today (src/engine/mod.rs `execute`, `start`,
//! `steps`, `take_completion`, `finish`; src/engine/attempt.rs): one read of the run with its
//! transcript, and 2 writes (the input with the save before the call; the attempt and the answer with the
//! final save). It must follow the engine when the engine changes.

use crate::args::BoxError;
use crate::cluster::fresh_namespace;
use crate::measure::thousands;
use freeway::chat::Message;
use freeway::job::RunJob;
use freeway::run::{AttemptRecord, RunRecord, RunStatus};
use freeway::store::{Attached, SqlStore, Store};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// Enough runs for a steady rate, few enough to keep the probe to a few seconds.
const MAX_RUNS: u64 = 2_000;
const WRITES_PER_RUN: u64 = 2;

pub(crate) async fn run(runs: u64, concurrency: u16) -> Result<(), BoxError> {
    let dir = std::env::temp_dir().join(fresh_namespace("store"));
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let result = probe(&dir, runs.min(MAX_RUNS), concurrency).await;
    if let Err(e) = std::fs::remove_dir_all(&dir) {
        eprintln!("load: could not remove {}: {e}", dir.display());
    }
    result
}

async fn probe(dir: &std::path::Path, runs: u64, concurrency: u16) -> Result<(), BoxError> {
    let url = format!("sqlite://{}", dir.join("probe.db").display());
    let store = Arc::new(SqlStore::open(&url).await?);
    let next = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let tasks: Vec<_> = (0..concurrency)
        .map(|_| {
            let (store, next) = (store.clone(), next.clone());
            tokio::spawn(async move {
                while next.fetch_add(1, Ordering::Relaxed) < runs {
                    one_run(store.as_ref()).await?;
                }
                Ok::<_, freeway::store::StoreError>(())
            })
        })
        .collect();
    for t in tasks {
        t.await??;
    }
    let elapsed = started.elapsed().as_secs_f64();
    store.close().await;
    println!(
        "  store alone      {runs} runs' store calls ({WRITES_PER_RUN} writes + 1 read \
         each, {concurrency} at once, one process, SQLite, no Redis or HTTP) in {elapsed:.2} s = {} runs/s \
         = {} writes/s",
        thousands(runs as f64 / elapsed),
        thousands((runs * WRITES_PER_RUN) as f64 / elapsed)
    );
    Ok(())
}

async fn one_run(store: &SqlStore) -> Result<(), freeway::store::StoreError> {
    let now = freeway::clock::epoch_ms;
    let job = RunJob::new(crate::workload::request(0), now());
    let (stored, _transcript) = store
        .run_and_transcript(&job.run_id, &job.conversation_id)
        .await?;
    let mut rec = stored.unwrap_or_else(|| RunRecord::queued(&job, now()));
    rec.state.input_applied = true;
    rec.status = RunStatus::Running;
    rec.state.counters.calls = 1;
    rec.state.counters.step1_attempts = 1;
    let input = Attached::Message {
        key: "input".into(),
        message: Message::user("Say something about load testing, please."),
    };
    store.save_run_with(&rec, &[input]).await?;
    let attempt = AttemptRecord {
        latency_ms: 1,
        ..AttemptRecord::succeeded(
            &rec.run_id,
            1,
            1,
            "openrouter/openai/gpt-4o-mini".into(),
            now(),
        )
    };
    rec.state.counters.steps = 1;
    rec.state.route_index = Some(0);
    rec.output = "A load test answer.".into();
    rec.status = RunStatus::Succeeded;
    let answer = Attached::Message {
        key: "step-1".into(),
        message: Message::assistant(Some("A load test answer.".into()), vec![]),
    };
    store
        .save_run_with(&rec, &[Attached::Attempt(attempt), answer])
        .await
}
