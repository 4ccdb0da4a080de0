//! `search`: the run list's text search at scale (`--runs`, default here 1,000,000 when the flag
//! is left at its default). A fresh store (SQLite, or PostgreSQL with `--postgres`) is filled
//! with runs whose inputs and answers carry words of a 5,000-word vocabulary and a token of their
//! own, as the producer and the workers store them; then each kind of search the board makes is
//! timed as the board makes it (a page of 50 and the counts by status), 20 times, and its median
//! and slowest reported.

use crate::args::{Args, BoxError};
use crate::cluster::Cluster;
use crate::measure::thousands;
use freeway::job::{RunJob, RunRequest};
use freeway::run::RunStatus;
use freeway::store::{RunFilter, SqlStore, Store};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Runs stored at once while filling: the writer batches them.
const FILL_AT_ONCE: u64 = 512;
const VOCABULARY: u64 = 5_000;
const TIMED: usize = 20;

pub(crate) async fn run(args: &Args) -> Result<(), BoxError> {
    let cluster = Cluster::start(&args.redis_url, "search", args.postgres.as_deref()).await?;
    let result = fill_and_time(&cluster.store, args.runs, args.postgres.is_some()).await;
    cluster.close(args.keep || result.is_err()).await;
    result
}

/// A word of the vocabulary.
fn word(n: u64) -> String {
    format!("w{:04x}z", n % VOCABULARY)
}

async fn fill_and_time(store: &SqlStore, runs: u64, postgres: bool) -> Result<(), BoxError> {
    let backend = if postgres { "PostgreSQL" } else { "SQLite" };
    let started = Instant::now();
    let store = Arc::new(store.clone());
    let mut ids = Vec::with_capacity(runs as usize);
    let mut next = 0;
    while next < runs {
        let batch: Vec<u64> = (next..runs.min(next + FILL_AT_ONCE)).collect();
        let before = next;
        next += batch.len() as u64;
        let tasks: Vec<_> = batch
            .into_iter()
            .map(|i| {
                let store = store.clone();
                tokio::spawn(async move { store_one(store.as_ref(), i).await })
            })
            .collect();
        for t in tasks {
            ids.push(t.await??);
        }
        if next / 100_000 > before / 100_000 && next < runs {
            println!(
                "  search           filled {} runs in {:.0} s",
                thousands(next as f64),
                started.elapsed().as_secs_f64()
            );
        }
    }
    println!(
        "  search           {} runs stored ({backend}, half of them answered) in {:.0} s",
        thousands(runs as f64),
        started.elapsed().as_secs_f64()
    );
    let middle = runs / 2;
    let id = &ids[middle as usize];
    let searches = [
        ("a token of one input", format!("q{middle:07}x")),
        ("a token of one answer", format!("a{:07}x", middle & !1)),
        ("a run id's first 16 characters", id[..16].to_lowercase()),
        ("a word of a few hundred runs", word(7)),
    ];
    for (what, q) in searches {
        let filter = RunFilter {
            q: Some(q.clone()),
            ..Default::default()
        };
        let mut times = Vec::with_capacity(TIMED);
        let mut found = 0;
        for _ in 0..TIMED {
            let t = Instant::now();
            let page = store.list_runs(&filter, None, 50).await?;
            let counts = store.count_runs(&filter).await?;
            times.push(t.elapsed());
            found = counts.iter().map(|(_, n)| n).sum::<u64>();
            if page.runs.is_empty() {
                return Err(format!("search {q:?} found nothing").into());
            }
        }
        times.sort();
        println!(
            "  search           {what} ({q:?}, {found} runs): median {:.1} ms, slowest {:.1} ms \
             (a page of 50 and the counts, {TIMED} times, {backend}, {} runs)",
            ms(times[TIMED / 2]),
            ms(times[TIMED - 1]),
            thousands(runs as f64)
        );
    }
    Ok(())
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Store run `i` as the producer does, and answer the even ones as a worker would.
async fn store_one(store: &SqlStore, i: u64) -> Result<String, freeway::store::StoreError> {
    let input = format!(
        "question q{i:07}x about {} and {}",
        word(i.wrapping_mul(7)),
        word(i.wrapping_mul(13) + 1)
    );
    let body = serde_json::json!({
        "user_id": format!("u{}", i % 1_000),
        "input": input,
        "routes": [{ "model": "vendor/model" }],
    });
    let request = RunRequest::from_json(
        body.to_string().as_bytes(),
        &freeway::catalog::Catalog::builtin(),
    )
    .map_err(|e| freeway::store::StoreError::Invalid(e.to_string()))?;
    let now = freeway::clock::epoch_ms();
    let job = RunJob::new(request, now);
    store.create_queued(&job, now).await?;
    if i.is_multiple_of(2) {
        let mut rec = freeway::run::RunRecord::queued(&job, now);
        rec.status = RunStatus::Succeeded;
        rec.output = format!(
            "answer a{i:07}x: {} then {}",
            word(i.wrapping_mul(3) + 2),
            word(i + 5)
        );
        store.save_run(&rec).await?;
    }
    Ok(job.run_id)
}
