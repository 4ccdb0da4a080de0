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
    let Some(s) = Server::open().await else {
        return;
    };
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
    let Some(s) = Server::open().await else {
        return;
    };
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
    let Some(s) = Server::open().await else {
        return;
    };
    let (status, _) = read_events(&s, "run_nope", None).await;
    assert_eq!(status, 404);
    let (_, body) = s.post_run(&run_body("u1", "vendor/m")).await;
    let run_id = body["run_id"].as_str().expect("run id");
    let (status, text) = read_events(&s, run_id, Some("not-an-id")).await;
    assert_eq!(status, 400, "{text}");
}

#[tokio::test]
async fn a_runs_events_url_opens_its_stream_alone_without_the_api_token_for_a_listed_origin() {
    use crate::common::{CORS_ORIGIN, JsonBody, SECRET_HEX, json_of};
    use freeway::store::SecretKey;
    let tokens = crate::tokens();
    let Some(s) = Server::start(tokens, Some(SecretKey::from_hex(SECRET_HEX).unwrap())).await
    else {
        return;
    };
    let mut urls = Vec::new();
    for user in ["u1", "u2"] {
        let resp = s
            .http
            .post(s.url("/v1/runs"))
            .bearer_auth("api-token-1")
            .json_body(&run_body(user, "vendor/m"))
            .send()
            .await
            .expect("POST");
        let body: Value = json_of(resp).await;
        let id = body["run_id"].as_str().expect("id").to_string();
        let url = body["events_url"].as_str().expect("events_url").to_string();
        assert!(
            url.starts_with(&format!("/v1/runs/{id}/events?token=")),
            "{url}"
        );
        s.publish(
            &id,
            &[Event::Finished {
                status: RunStatus::Succeeded,
                code: None,
                usage: Usage::default(),
            }],
        )
        .await;
        urls.push((id, url));
    }
    let get = |path: String, origin: Option<&'static str>| {
        let mut req = s.http.get(s.url(&path));
        if let Some(o) = origin {
            req = req.header("origin", o);
        }
        async move { req.send().await.expect("GET") }
    };
    let resp = get(urls[0].1.clone(), Some(CORS_ORIGIN)).await;
    assert_eq!(
        resp.status().as_u16(),
        200,
        "no API token, the run's own URL"
    );
    let allowed = resp.headers().get("access-control-allow-origin").cloned();
    assert_eq!(
        allowed.as_ref().and_then(|v| v.to_str().ok()),
        Some(CORS_ORIGIN)
    );
    let body = resp.text().await.unwrap();
    assert!(
        sse_events(&body).iter().any(|(_, e, _)| e == "finished"),
        "{body}"
    );
    let other = get(urls[0].1.clone(), Some("https://elsewhere.example")).await;
    assert!(
        other.headers().get("access-control-allow-origin").is_none(),
        "an unlisted origin"
    );

    let (first, second) = (&urls[0].0, &urls[1].1);
    let token = second.split_once("token=").map(|(_, t)| t).unwrap();
    let resp = get(format!("/v1/runs/{first}/events?token={token}"), None).await;
    assert_eq!(
        resp.status().as_u16(),
        403,
        "a second run's token does not open the first"
    );
    let tampered = format!("{}x", urls[0].1);
    assert_eq!(get(tampered, None).await.status().as_u16(), 403);
    let bare = get(format!("/v1/runs/{first}/events"), None).await;
    assert_eq!(
        bare.status().as_u16(),
        401,
        "without a token, the API token is needed"
    );
}
