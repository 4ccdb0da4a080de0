//! Acting on runs (docs/api.md): cancel, retry and wake, each checked against the run's status,
//! scoped to a user with the API token or open to any run with the admin token.

use crate::common::{Server, json_of};
use crate::{code, tokens};
use freeway::classify::{RestLength, RestScope};
use freeway::events::stream_key;
use freeway::job::RunJob;
use freeway::rest::Rests;
use freeway::run::RunStatus;
use freeway::store::Store;
use serde_json::{Value, json};

/// `POST path` with `token`: the status and the body (`null` when empty).
async fn act(s: &Server, path: &str, token: &str) -> (u16, Value) {
    let resp = s
        .http
        .post(s.url(path))
        .bearer_auth(token)
        .send()
        .await
        .expect("POST");
    let status = resp.status().as_u16();
    let text = resp.text().await.expect("body");
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// The type of the newest event on the run's stream.
async fn last_event(s: &Server, run_id: &str) -> String {
    let mut conn = s.conn.clone();
    let newest: Vec<(String, Vec<(String, String)>)> = redis::cmd("XREVRANGE")
        .arg(stream_key(&s.ns, run_id))
        .arg("+")
        .arg("-")
        .arg("COUNT")
        .arg(1)
        .query_async(&mut conn)
        .await
        .expect("XREVRANGE");
    let fields = newest
        .into_iter()
        .next()
        .map(|(_, f)| f)
        .unwrap_or_default();
    let kind = fields.into_iter().find(|(k, _)| k == "type");
    kind.map(|(_, v)| v).unwrap_or_default()
}

async fn enqueued(s: &Server, user: &str) -> String {
    let body = json!({ "user_id": user, "input": "hi", "routes": [{ "model": "vendor/m" }] });
    let resp = s
        .http
        .post(s.url("/v1/runs"))
        .bearer_auth("api-token-1")
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .expect("POST");
    let body: Value = json_of(resp).await;
    body["run_id"].as_str().expect("run id").to_string()
}

#[tokio::test]
async fn a_queued_run_is_cancelled_once_and_retried_as_a_new_run_that_names_it() {
    let Some(s) = Server::start(tokens(), None).await else {
        return;
    };
    let id = enqueued(&s, "u1").await;
    let cancel = format!("/v1/runs/{id}/cancel");
    let (status, err) = act(&s, &cancel, "api-token-1").await;
    assert_eq!(
        (status, code(&err)),
        (403, "unauthorized"),
        "any run is the operator's: {err}"
    );
    let (status, other) = act(&s, &format!("{cancel}?user_id=u2"), "api-token-1").await;
    assert_eq!(
        (status, code(&other)),
        (404, "not_found"),
        "another user's run is none"
    );
    let (status, body) = act(&s, &format!("{cancel}?user_id=u1"), "api-token-1").await;
    assert_eq!(
        (status, &body["status"]),
        (202, &json!("cancelled")),
        "{body}"
    );
    let rec = s.store.run(&id).await.unwrap().unwrap();
    assert_eq!(rec.status, RunStatus::Cancelled);
    assert_eq!(last_event(&s, &id).await, "cancelled", "the stream ends");
    let (status, err) = act(&s, &cancel, "admin-token-1").await;
    assert_eq!((status, code(&err)), (409, "conflict"), "once: {err}");

    let (status, err) = act(&s, &format!("/v1/runs/{id}/wake"), "admin-token-1").await;
    assert_eq!(
        (status, code(&err)),
        (409, "conflict"),
        "only a delayed run wakes: {err}"
    );
    let retry = format!("/v1/runs/{id}/retry");
    let (status, body) = act(&s, &retry, "admin-token-1").await;
    assert_eq!(status, 202, "{body}");
    let new_id = body["run_id"].as_str().expect("a new run").to_string();
    assert_ne!(new_id, id);
    let new = s.store.run(&new_id).await.unwrap().unwrap();
    assert_eq!(
        (new.status, new.retry_of.as_deref()),
        (RunStatus::Queued, Some(id.as_str()))
    );
    assert_eq!(
        (new.user_id.as_str(), &new.routes),
        ("u1", &rec.routes),
        "the same request"
    );
    let (_, again) = act(&s, &retry, "admin-token-1").await;
    assert_eq!(
        again["run_id"],
        new_id.as_str(),
        "a second retry is the same new run"
    );
    let (status, err) = act(&s, &format!("/v1/runs/{new_id}/retry"), "admin-token-1").await;
    assert_eq!(
        (status, code(&err)),
        (409, "conflict"),
        "a queued run is not retried: {err}"
    );
}

#[tokio::test]
async fn a_delayed_run_wakes_now_and_a_cancelled_one_leaves_the_schedule() {
    let Some(s) = Server::start(tokens(), None).await else {
        return;
    };
    let id = enqueued(&s, "u1").await;
    let job: RunJob = s.enqueuer.job(&id).await.unwrap().expect("the job copy");
    let far = freeway::clock::epoch_ms() + 3_600_000;
    s.enqueuer.queue().snooze(&job, far).await.unwrap();
    let mut rec = s.store.run(&id).await.unwrap().unwrap();
    rec.status = RunStatus::Delayed;
    s.store.save_run(&rec).await.unwrap();
    let snoozed = format!("{}:snoozed", s.enqueuer.queue().name());
    let score = |s: &Server| {
        let (mut conn, key, member) = (s.conn.clone(), snoozed.clone(), id.clone());
        async move {
            let score: Option<f64> = redis::cmd("ZSCORE")
                .arg(key)
                .arg(member)
                .query_async(&mut conn)
                .await
                .unwrap();
            score
        }
    };
    assert_eq!(score(&s).await, Some(far as f64), "parked for an hour");
    // While its route rests, "run now" would only park it again: it says so and waits on.
    let rests = s.enqueuer.rests();
    let route = RestScope::Route {
        pool: None,
        route_key: "platform:openrouter/vendor/m".into(),
    };
    rests
        .write(&route, RestLength::For(120_000), "test")
        .await
        .unwrap();
    let wake = format!("/v1/runs/{id}/wake?user_id=u1");
    let (status, body) = act(&s, &wake, "api-token-1").await;
    assert_eq!(
        (status, &body["status"]),
        (200, &json!("delayed")),
        "{body}"
    );
    let until = body["until_ms"].as_u64().expect("until when it waits");
    let in_ms = until.saturating_sub(freeway::clock::epoch_ms());
    assert!((110_000..=120_000).contains(&in_ms), "{body}");
    let message = body["message"].as_str().unwrap_or_default();
    assert!(message.starts_with("not woken"), "{message}");
    assert_eq!(
        score(&s).await,
        Some(far as f64),
        "still parked at its time"
    );
    rests
        .clear("route", "platform:openrouter/vendor/m")
        .await
        .unwrap();
    let (status, body) = act(&s, &wake, "api-token-1").await;
    assert_eq!((status, &body["status"]), (200, &json!("queued")), "{body}");
    let now = score(&s).await.expect("still parked, due now");
    assert!(now <= freeway::clock::epoch_ms() as f64, "due: {now}");
    let (status, _) = act(&s, &format!("/v1/runs/{id}/cancel"), "admin-token-1").await;
    assert_eq!(status, 202);
    assert_eq!(
        score(&s).await,
        None,
        "the cancelled run is no longer parked"
    );
}

#[tokio::test]
async fn a_retry_of_a_run_whose_input_is_in_the_conversation_regenerates_instead_of_resending_it() {
    let Some(s) = Server::start(tokens(), None).await else {
        return;
    };
    let id = enqueued(&s, "u1").await;
    let mut rec = s.store.run(&id).await.unwrap().unwrap();
    rec.status = RunStatus::Failed;
    rec.state.input_applied = true;
    s.store.save_run(&rec).await.unwrap();
    let (status, body) = act(&s, &format!("/v1/runs/{id}/retry"), "admin-token-1").await;
    assert_eq!(status, 202, "{body}");
    let new_id = body["run_id"].as_str().expect("a new run");
    let job = s.enqueuer.job(new_id).await.unwrap().expect("the new job");
    assert_eq!(
        (job.request.input.as_deref(), job.request.regenerate),
        (None, true),
        "the input is not appended twice"
    );
    assert_eq!(
        job.conversation_id, rec.conversation_id,
        "the same conversation"
    );
    assert_eq!(job.retry_of.as_deref(), Some(id.as_str()));
}
