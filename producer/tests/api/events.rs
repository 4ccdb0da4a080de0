//! A run's events over SSE (`GET /v1/runs/{id}/events`): relayed in order, resumed after
//! `Last-Event-ID`, and closed at once when the run has settled.

use crate::common::{Server, run_body};
use freeway::chat::Usage;
use freeway::events::Event;
use freeway::run::RunStatus;
use freeway::store::Store;
use serde_json::{Value, json};

/// An SSE body's events as (id, event, data).
fn sse_events(body: &str) -> Vec<(String, String, String)> {
    body.split("\n\n")
        .filter_map(|block| {
            let field = |name: &str| {
                block
                    .lines()
                    .find_map(|l| l.strip_prefix(&format!("{name}: ")))
                    .map(str::to_string)
            };
            Some((
                field("id").unwrap_or_default(),
                field("event")?,
                field("data")?,
            ))
        })
        .collect()
}

async fn read_events(s: &Server, run_id: &str, last_event_id: Option<&str>) -> (u16, String) {
    let mut req = s.http.get(s.url(&format!("/v1/runs/{run_id}/events")));
    if let Some(id) = last_event_id {
        req = req.header("last-event-id", id);
    }
    let resp = req.send().await.expect("GET events");
    let status = resp.status().as_u16();
    (status, resp.text().await.expect("the whole body"))
}

#[tokio::test]
async fn events_are_relayed_in_order_and_resume_after_last_event_id() {
    let s = Server::open().await;
    let (_, body) = s.post_run(&run_body("u1", "vendor/m")).await;
    let run_id = body["run_id"].as_str().expect("run id").to_string();
    s.publish(
        &run_id,
        &[
            Event::Started {
                worker: "w1".into(),
            },
            Event::Delta { text: "Hel".into() },
            Event::Delta { text: "lo".into() },
            Event::Finished {
                status: RunStatus::Succeeded,
                code: None,
                usage: Usage::default(),
            },
            // After the last event: never relayed.
            Event::Delta {
                text: "late".into(),
            },
        ],
    )
    .await;

    let (status, text) = read_events(&s, &run_id, None).await;
    assert_eq!(status, 200);
    let events = sse_events(&text);
    let kinds: Vec<&str> = events.iter().map(|e| e.1.as_str()).collect();
    assert_eq!(kinds, ["queued", "started", "delta", "delta", "finished"]);
    let texts: Vec<Value> = events
        .iter()
        .map(|e| serde_json::from_str(&e.2).expect("event JSON"))
        .collect();
    assert_eq!(texts[2], json!({ "type": "delta", "text": "Hel" }));
    assert_eq!(texts[4]["status"], "succeeded");

    let (_, text) = read_events(&s, &run_id, Some(&events[2].0)).await;
    let resumed = sse_events(&text);
    assert_eq!(resumed, events[3..].to_vec());

    // A client that saw the end and reconnects gets an empty stream that closes at once.
    let (status, text) = read_events(&s, &run_id, Some(&events[4].0)).await;
    assert_eq!(status, 200);
    assert!(sse_events(&text).is_empty(), "{text}");
}

#[tokio::test]
async fn the_events_of_a_settled_run_whose_stream_expired_close_at_once() {
    let s = Server::open().await;
    let (_, body) = s.post_run(&run_body("u1", "vendor/m")).await;
    let run_id = body["run_id"].as_str().expect("run id");
    let mut rec = s.store.run(run_id).await.expect("read").expect("run");
    rec.status = RunStatus::Succeeded;
    s.store.save_run(&rec).await.expect("saved");
    let mut conn = s.conn.clone();
    let deleted: i64 = redis::cmd("DEL")
        .arg(freeway::events::stream_key(&s.ns, run_id))
        .query_async(&mut conn)
        .await
        .expect("DEL");
    assert_eq!(deleted, 1);
    let started = std::time::Instant::now();
    let (status, text) = read_events(&s, run_id, None).await;
    assert_eq!(status, 200);
    let events = sse_events(&text);
    assert_eq!(
        events.len(),
        1,
        "only the last event, from the store: {text}"
    );
    assert_eq!(events[0].1, "finished", "{text}");
    assert!(events[0].2.contains(r#""status":"succeeded""#), "{text}");
    assert!(
        started.elapsed() < producer::stream::BLOCK,
        "closed without waiting for a read to time out"
    );
}

#[tokio::test]
async fn events_of_an_unknown_run_or_from_a_bad_position_are_refused() {
    let s = Server::open().await;
    let (status, _) = read_events(&s, "run_nope", None).await;
    assert_eq!(status, 404);
    let (_, body) = s.post_run(&run_body("u1", "vendor/m")).await;
    let run_id = body["run_id"].as_str().expect("run id");
    let (status, text) = read_events(&s, run_id, Some("not-an-id")).await;
    assert_eq!(status, 400, "{text}");
}
