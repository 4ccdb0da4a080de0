//! Answering a paused run's tool call (`POST /v1/runs/{id}/approvals`): only the call it awaits,
//! one continuation per answer, and a denial the model is told of.

use crate::common::{JsonBody, Server, json_of, run_body};
use crate::{awaiting_run, code, tokens};
use freeway::store::Store;
use serde_json::{Value, json};

async fn approve(s: &Server, run_id: &str, body: Value) -> (u16, Value) {
    let resp = s
        .http
        .post(s.url(&format!("/v1/runs/{run_id}/approvals")))
        .json_body(&body)
        .send()
        .await
        .expect("POST approvals");
    let status = resp.status().as_u16();
    (status, json_of(resp).await)
}

#[tokio::test]
async fn an_approval_conflicts_unless_the_run_awaits_that_call() {
    let Some(s) = Server::open().await else {
        return;
    };
    let (_, body) = s.post_run(&run_body("u1", "vendor/m")).await;
    let queued = body["run_id"].as_str().expect("run id");
    let yes = json!({ "tool_call_id": "call_1", "decision": "approve" });
    let (status, err) = approve(&s, queued, yes.clone()).await;
    assert_eq!((status, code(&err)), (409, "conflict"), "{err}");

    let waiting = awaiting_run(&s).await;
    let wrong = json!({ "tool_call_id": "call_9", "decision": "approve" });
    let (status, err) = approve(&s, &waiting, wrong).await;
    assert_eq!((status, code(&err)), (409, "conflict"), "{err}");
    let (status, err) = approve(
        &s,
        &waiting,
        json!({ "tool_call_id": "call_1", "decision": "maybe" }),
    )
    .await;
    assert_eq!((status, code(&err)), (400, "invalid_request"), "{err}");
    let (status, _) = approve(&s, "run_nope", yes).await;
    assert_eq!(status, 404);
    assert_eq!(
        s.enqueuer.queue().depths().await.expect("depths").waiting,
        2
    );
}

#[tokio::test]
async fn an_approval_enqueues_one_continuation() {
    let Some(s) = Server::open().await else {
        return;
    };
    let parent = awaiting_run(&s).await;
    let parent_job = s.enqueuer.job(&parent).await.expect("read").expect("kept");
    let yes = json!({ "tool_call_id": "call_1", "decision": "approve", "result": "sent" });
    let (status, body) = approve(&s, &parent, yes.clone()).await;
    assert_eq!(status, 202, "{body}");
    let child = body["run_id"].as_str().expect("continuation id");
    assert_ne!(child, parent);

    let (_, run) = s.get_json(&format!("/v1/runs/{child}")).await;
    assert_eq!(run["status"], "queued");
    assert_eq!(run["parent_run_id"], parent.as_str());
    assert_eq!(run["conversation_id"], parent_job.conversation_id.as_str());
    let job = s.enqueuer.job(child).await.expect("read").expect("kept");
    let c = job.continuation.expect("a continuation");
    assert_eq!(
        (
            c.parent_run_id.as_str(),
            c.tool_call.id.as_str(),
            c.result.as_str()
        ),
        (parent.as_str(), "call_1", "sent")
    );
    assert_eq!(job.conversation_id, parent_job.conversation_id);
    assert_eq!(job.request.tools, parent_job.request.tools);
    assert_eq!(
        s.enqueuer.queue().depths().await.expect("depths").waiting,
        2
    );

    let (_, run) = s.get_json(&format!("/v1/runs/{parent}")).await;
    assert_eq!(run["status"], "succeeded");
    assert_eq!(run["pending_approval"], Value::Null);
    let answered = &run["approvals"][0];
    assert_eq!(
        (
            &answered["tool_call"]["id"],
            &answered["decided"]["decision"],
            &answered["decided"]["result"],
            &answered["decided"]["continuation_run_id"],
        ),
        (
            &json!("call_1"),
            &json!("approve"),
            &json!("sent"),
            &json!(child)
        ),
        "the parent keeps who was answered what: {run}"
    );
    let (status, err) = approve(&s, &parent, yes).await;
    assert_eq!((status, code(&err)), (409, "conflict"), "{err}");
    assert_eq!(
        s.enqueuer.queue().depths().await.expect("depths").waiting,
        2
    );
}

#[tokio::test]
async fn a_denial_tells_the_model_the_user_said_no() {
    let Some(s) = Server::open().await else {
        return;
    };
    let parent = awaiting_run(&s).await;
    let (status, body) = approve(
        &s,
        &parent,
        json!({ "tool_call_id": "call_1", "decision": "deny" }),
    )
    .await;
    assert_eq!(status, 202, "{body}");
    let child = body["run_id"].as_str().expect("continuation id");
    let job = s.enqueuer.job(child).await.expect("read").expect("kept");
    assert_eq!(
        job.continuation.expect("continuation").result,
        "denied by the user"
    );
}

/// An approval and a cancel sent at the same moment: exactly one wins, decided by the store in
/// one step. A cancelled run gets no continuation; an approved one cannot be cancelled after.
/// (Both answered 202, and the "cancelled" run's continuation called the model.)
#[tokio::test]
async fn an_approval_and_a_cancel_at_once_have_exactly_one_winner() {
    let Some(s) = Server::start(tokens(), None).await else {
        return;
    };
    let post = |path: String, body: Option<Value>| {
        let mut req = s.http.post(s.url(&path)).bearer_auth("admin-token-1");
        if let Some(b) = body {
            req = req.json_body(&b);
        }
        async move {
            let resp = req.send().await.expect("POST");
            let status = resp.status().as_u16();
            (status, json_of(resp).await)
        }
    };
    let mut approved = 0;
    let tries = 12;
    for _ in 0..tries {
        let run = awaiting_run(&s).await;
        let yes = json!({ "tool_call_id": "call_1", "decision": "approve" });
        let ((approve_status, approval), (cancel_status, cancelled)) = tokio::join!(
            post(format!("/v1/runs/{run}/approvals"), Some(yes)),
            post(format!("/v1/runs/{run}/cancel"), None)
        );
        let stored = s.store.run(&run).await.expect("read").expect("run");
        match (approve_status, cancel_status) {
            (202, 409) => {
                approved += 1;
                assert_eq!(stored.status.as_str(), "succeeded");
                assert_eq!(code(&cancelled), "conflict");
            }
            (409, 202) => {
                assert_eq!(stored.status.as_str(), "cancelled");
                assert_eq!(code(&approval), "conflict");
            }
            other => panic!("both or neither won: {other:?}: {approval} {cancelled}"),
        }
    }
    let waiting = s.enqueuer.queue().depths().await.expect("depths").waiting;
    assert_eq!(
        waiting,
        tries + approved,
        "one continuation per approval that won, none for a cancel that did"
    );
}
