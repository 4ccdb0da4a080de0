//! A flood of event-stream clients on one run, against a running `producer serve`: how many are
//! served and how many refused (503 past `FREEWAY_MAX_STREAMS`), whether every served client
//! gets the run's last event, and how fast the API answers while they are all open.
//!
//! ```sh
//! REDIS_URL=redis://127.0.0.1:6379 FREEWAY_NAMESPACE=freeway target/release/producer serve &
//! REDIS_URL=redis://127.0.0.1:6379 FREEWAY_NAMESPACE=freeway \
//!     cargo run --release -p producer --example sse_flood -- http://127.0.0.1:8080 5000
//! ```
//!
//! It enqueues one run (no worker needs to run), opens the streams, times `GET /v1/runs/{id}`,
//! then publishes the run's `finished` event itself and counts who saw it. Raise `ulimit -n` for
//! both processes past the number of clients.

use freeway::events::{Event, EventSink};
use futures_util::StreamExt;
use std::time::{Duration, Instant};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let api = args
        .next()
        .unwrap_or_else(|| "http://127.0.0.1:8080".into());
    let clients: usize = args.next().map_or(Ok(5000), |n| n.parse())?;
    let redis_url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let ns = std::env::var("FREEWAY_NAMESPACE").unwrap_or_else(|_| "freeway".into());
    freeway::provider::install_crypto();
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()?;

    let body =
        r#"{"user_id":"flood","input":"hi","routes":[{"model":"vendor/paid"}],"on_rest":"queue"}"#;
    let reply = http
        .post(format!("{api}/v1/runs"))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await?
        .text()
        .await?;
    let run_id = serde_json::from_str::<serde_json::Value>(&reply)?["run_id"]
        .as_str()
        .ok_or("no run id")?
        .to_string();

    let (opened_tx, mut opened_rx) = tokio::sync::mpsc::unbounded_channel::<u16>();
    let mut streams = tokio::task::JoinSet::new();
    for _ in 0..clients {
        let (http, url, opened) = (
            http.clone(),
            format!("{api}/v1/runs/{run_id}/events"),
            opened_tx.clone(),
        );
        streams.spawn(async move {
            let Ok(resp) = http.get(url).send().await else {
                let _ = opened.send(0);
                return false;
            };
            let _ = opened.send(resp.status().as_u16());
            if !resp.status().is_success() {
                return false;
            }
            let mut body = resp.bytes_stream();
            while let Some(Ok(chunk)) = body.next().await {
                if String::from_utf8_lossy(&chunk).contains("event: finished") {
                    return true;
                }
            }
            false
        });
    }
    let (mut served, mut refused, mut failed) = (0, 0, 0);
    let started = Instant::now();
    // Every client reports once its answer's head arrived (served ones then keep streaming).
    for _ in 0..clients {
        let Some(status) = opened_rx.recv().await else {
            break;
        };
        match status {
            200 => served += 1,
            503 => refused += 1,
            _ => failed += 1,
        }
    }
    println!(
        "clients {clients}: served {served}, refused 503 {refused}, other {failed} (all answered in {:?})",
        started.elapsed()
    );

    let mut worst = Duration::ZERO;
    for _ in 0..20 {
        let t = Instant::now();
        let status = http
            .get(format!("{api}/v1/runs/{run_id}"))
            .send()
            .await?
            .status();
        worst = worst.max(t.elapsed());
        assert!(status.is_success(), "GET /v1/runs/{run_id}: {status}");
    }
    println!("GET /v1/runs/{{id}} with every stream open: worst of 20 {worst:?}");

    let conn = freeway::connect::redis(&redis_url).await?;
    let finished = Event::Finished {
        status: freeway::run::RunStatus::Succeeded,
        code: None,
        usage: Default::default(),
    };
    let published = Instant::now();
    freeway::fleet::RedisFleet::new(conn, &ns)
        .events()
        .publish(&run_id, &finished)
        .await?;
    let mut saw_it = 0;
    while let Some(result) = streams.join_next().await {
        saw_it += usize::from(result.unwrap_or(false));
    }
    println!(
        "served clients that got the finished event: {saw_it} of {served} (in {:?})",
        published.elapsed()
    );
    Ok(())
}
