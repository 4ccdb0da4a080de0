//! Load generator: how many requests a second the simulator serves on one core.
//!
//! The simulator runs in-process on a single-threaded tokio runtime in its own thread (so it
//! gets one core); reqwest hammers it from a second runtime with one worker thread. Two runs:
//! non-streaming and streaming requests to a paid model (not counted against the free quota).
//!
//! `cargo run --release -p sim --example loadgen -- --requests 50000 --concurrency 64`

use std::error::Error;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;
use sim::SimConfig;

#[derive(Debug, Parser)]
#[command(about = "Measure the simulator's throughput on one core")]
struct Args {
    /// Requests per run
    #[arg(long, default_value_t = 50_000)]
    requests: u64,
    /// Requests in flight at once
    #[arg(long, default_value_t = 64)]
    concurrency: usize,
}

type BoxError = Box<dyn Error + Send + Sync>;

fn main() -> Result<(), BoxError> {
    let args = Args::parse();
    if args.concurrency == 0 {
        return Err("--concurrency must be at least 1".into());
    }

    let (addr_tx, addr_rx) = std::sync::mpsc::channel::<SocketAddr>();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = std::thread::spawn(move || -> Result<(), BoxError> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        rt.block_on(async move {
            let handle = sim::start(SimConfig::default(), "127.0.0.1:0".parse()?).await?;
            addr_tx.send(handle.addr)?;
            // Either a stop request or the client side going away ends the server.
            let _ = stop_rx.await;
            handle.shutdown().await;
            Ok(())
        })
    });
    let addr = addr_rx.recv()?;

    let _ = rustls::crypto::ring::default_provider().install_default();
    let client_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let result = client_rt.block_on(async {
        let client = reqwest::Client::builder()
            .no_proxy()
            .pool_max_idle_per_host(args.concurrency)
            .build()?;
        let url = format!("http://{addr}/api/v1/chat/completions");
        println!(
            "sim on {addr}: {} requests per run, concurrency {}",
            args.requests, args.concurrency
        );
        for stream in [false, true] {
            let run = hammer(&client, &url, stream, &args).await?;
            let label = if stream { "streaming" } else { "non-streaming" };
            println!(
                "{label:>13}: {} ok, {} failed in {:.2?} = {:.0} req/s",
                run.ok,
                run.failed,
                run.elapsed,
                run.ok as f64 / run.elapsed.as_secs_f64()
            );
        }
        Ok::<(), BoxError>(())
    });
    let _ = stop_tx.send(());
    match server.join() {
        Ok(served) => served?,
        Err(_) => return Err("the simulator thread panicked".into()),
    }
    result
}

struct Run {
    ok: u64,
    failed: u64,
    elapsed: Duration,
}

async fn hammer(
    client: &reqwest::Client,
    url: &str,
    stream: bool,
    args: &Args,
) -> Result<Run, BoxError> {
    let body = serde_json::json!({
        "model": "openai/gpt-4o-mini",
        "stream": stream,
        "messages": [{"role": "user", "content": "Say something about load testing please"}]
    })
    .to_string();
    let next = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(args.concurrency);
    for _ in 0..args.concurrency {
        let (client, url, body, next) =
            (client.clone(), url.to_owned(), body.clone(), next.clone());
        let total = args.requests;
        tasks.push(tokio::spawn(async move {
            let (mut ok, mut failed) = (0u64, 0u64);
            while next.fetch_add(1, Ordering::Relaxed) < total {
                let sent = client
                    .post(&url)
                    .bearer_auth("sk-or-v1-loadgen")
                    .header("content-type", "application/json")
                    .body(body.clone())
                    .send()
                    .await;
                // A request counts as served only once its whole body has arrived.
                let served = match sent {
                    Ok(res) if res.status().is_success() => res.bytes().await.is_ok(),
                    _ => false,
                };
                if served {
                    ok += 1;
                } else {
                    failed += 1;
                }
            }
            (ok, failed)
        }));
    }
    let (mut ok, mut failed) = (0, 0);
    for task in tasks {
        let (o, f) = task.await?;
        ok += o;
        failed += f;
    }
    Ok(Run {
        ok,
        failed,
        elapsed: started.elapsed(),
    })
}
