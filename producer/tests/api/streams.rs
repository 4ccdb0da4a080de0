//! Event streams at scale: `GET /v1/runs/{id}/events` served by one shared Redis reader rather
//! than a connection per stream. Real Redis (`REDIS_URL`), the API in-process. These tests have
//! a binary of their own so that counting Redis's clients sees few other tests' connections.

use crate::common;

use common::{Server, json_of, run_body};
use freeway::chat::Usage;
use freeway::events::Event;
use futures_util::future::join_all;
use producer::api::auth::Tokens;
use std::time::{Duration, Instant};

/// Redis's connected clients, all of them (other tests' too).
async fn redis_clients(s: &Server) -> usize {
    let mut conn = s.conn.clone();
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query_async(&mut conn)
        .await
        .expect("CLIENT LIST");
    list.lines().count()
}

/// An open event stream and what it has sent so far.
struct Client {
    run: usize,
    resp: reqwest::Response,
    text: String,
}

impl Client {
    /// Open the stream of `run_id` and read until its first event (`queued`) came.
    async fn open(s: &Server, run: usize, run_id: &str) -> Client {
        let resp = s
            .http
            .get(s.url(&format!("/v1/runs/{run_id}/events")))
            .send()
            .await
            .expect("GET events");
        assert_eq!(resp.status().as_u16(), 200);
        let mut client = Client {
            run,
            resp,
            text: String::new(),
        };
        while !client.text.contains("event: queued\n") {
            client
                .read()
                .await
                .expect("the queued event before the end");
        }
        client
    }

    /// One more chunk; `None` at the end of the body.
    async fn read(&mut self) -> Option<()> {
        let chunk = self.resp.chunk().await.expect("a chunk")?;
        self.text.push_str(&String::from_utf8_lossy(&chunk));
        Some(())
    }

    /// The rest of the stream: the event types it sent, in order.
    async fn finish(mut self) -> (usize, Vec<String>, String) {
        while self.read().await.is_some() {}
        let kinds = self
            .text
            .lines()
            .filter_map(|l| l.strip_prefix("event: "))
            .map(str::to_string)
            .collect();
        (self.run, kinds, self.text)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hundreds_of_streams_share_one_redis_reader_and_each_gets_its_runs_events() {
    // Three clients a run: a run's events hold at most `PER_RUN` streams.
    const RUNS: usize = 100;
    const CLIENTS: usize = 300;
    let Some(s) = Server::open().await else {
        return;
    };
    let mut runs = Vec::new();
    for n in 0..RUNS {
        let (status, body) = s.post_run(&run_body(&format!("u{n}"), "vendor/m")).await;
        assert_eq!(status, 202, "{body}");
        runs.push(body["run_id"].as_str().expect("run id").to_string());
    }
    let before = redis_clients(&s).await;
    let clients = join_all((0..CLIENTS).map(|n| {
        let run = n % RUNS;
        Client::open(&s, run, &runs[run])
    }))
    .await;
    let during = redis_clients(&s).await;
    assert!(
        during <= before + 10,
        "{CLIENTS} open streams took {} Redis connections",
        during.saturating_sub(before)
    );
    let started = Instant::now();
    let (status, run) = s.get_json(&format!("/v1/runs/{}", runs[0])).await;
    assert_eq!(status, 200, "{run}");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "GET /v1/runs/{{id}} took {:?} beside the streams",
        started.elapsed()
    );

    for (n, run_id) in runs.iter().enumerate() {
        s.publish(
            run_id,
            &[
                Event::Started {
                    worker: format!("w{n}"),
                },
                Event::Delta {
                    text: format!("answer of run {n}"),
                },
                Event::Finished {
                    status: freeway::run::RunStatus::Succeeded,
                    code: None,
                    usage: Usage::default(),
                },
            ],
        )
        .await;
    }
    for (run, kinds, text) in join_all(clients.into_iter().map(Client::finish)).await {
        assert_eq!(kinds, ["queued", "started", "delta", "finished"], "{text}");
        assert!(text.contains(&format!("answer of run {run}")), "{text}");
        for other in (0..RUNS).filter(|&o| o != run) {
            assert!(
                !text.contains(&format!("answer of run {other}\"")),
                "{text}"
            );
        }
    }
}

async fn enqueue(s: &Server) -> String {
    let (status, body) = s.post_run(&run_body("u1", "vendor/m")).await;
    assert_eq!(status, 202, "{body}");
    body["run_id"].as_str().expect("run id").to_string()
}

#[tokio::test]
async fn past_max_streams_a_stream_is_503_with_retry_after_until_a_client_leaves() {
    let Some(s) = Server::start_capped(Tokens::default(), None, 3).await else {
        return;
    };
    let (a, b) = (enqueue(&s).await, enqueue(&s).await);
    // The cap is the process's, whatever the runs.
    let mut open = vec![
        Client::open(&s, 0, &a).await,
        Client::open(&s, 0, &a).await,
        Client::open(&s, 1, &b).await,
    ];
    let events_of_b = s.url(&format!("/v1/runs/{b}/events"));
    let resp = s.http.get(&events_of_b).send().await.expect("GET");
    assert_eq!(resp.status().as_u16(), 503);
    let retry_after = resp
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    assert_eq!(retry_after.as_deref(), Some("5"));
    let err = json_of(resp).await;
    assert_eq!(err["error"]["code"], "unavailable", "{err}");

    drop(open.pop());
    // The slot is free once the server has seen the client go.
    let deadline = Instant::now() + Duration::from_secs(5);
    let reopened = loop {
        let resp = s.http.get(&events_of_b).send().await.expect("GET");
        if resp.status().as_u16() != 503 {
            break resp;
        }
        assert!(Instant::now() < deadline, "no slot came free");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert_eq!(reopened.status().as_u16(), 200);
    let resp = s.http.get(&events_of_b).send().await.expect("GET");
    assert_eq!(resp.status().as_u16(), 503, "the cap holds again");
}

/// One browser opening a run's `events_url` over and over holds a few slots, not the process's:
/// past [`PER_RUN`] that run's new streams are 503, while another run's stream still opens.
/// (A single run's URL opened 1,000 times took every slot; every other stream got 503.)
#[tokio::test]
async fn one_runs_streams_hold_a_few_slots_and_leave_the_rest_to_everyone_else() {
    use producer::api::stream_slots::PER_RUN;
    let Some(s) = Server::start_capped(Tokens::default(), None, 100).await else {
        return;
    };
    let (a, b) = (enqueue(&s).await, enqueue(&s).await);
    let mut open = Vec::new();
    for n in 0..PER_RUN {
        open.push(Client::open(&s, n, &a).await);
    }
    let events_of_a = s.url(&format!("/v1/runs/{a}/events"));
    for _ in 0..20 {
        let resp = s.http.get(&events_of_a).send().await.expect("GET");
        assert_eq!(resp.status().as_u16(), 503);
        let err = json_of(resp).await;
        assert!(
            err["error"]["message"]
                .as_str()
                .unwrap_or_default()
                .contains("this run"),
            "{err}"
        );
    }
    let other = Client::open(&s, PER_RUN, &b).await;
    drop(other);
    drop(open);
}
