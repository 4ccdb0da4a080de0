//! One user's runs and conversations are not another's: named by another user they are not
//! found, and nothing is written for them.

use crate::common::{JsonBody, Server};
use crate::{awaiting_run, code};
use serde_json::json;

#[tokio::test]
async fn a_run_on_another_users_conversation_is_not_found_and_nothing_is_written() {
    let Some(s) = Server::open().await else {
        return;
    };
    let first = json!({ "user_id": "u1", "input": "hello", "routes": [{ "model": "vendor/m" }] });
    let (status, body) = s.post_run(&first).await;
    assert_eq!(status, 202, "{body}");
    let run_id = body["run_id"].as_str().expect("run id");
    let (_, run) = s.get_json(&format!("/v1/runs/{run_id}")).await;
    let conversation = run["conversation_id"]
        .as_str()
        .expect("conversation")
        .to_string();

    let mut theirs = first.clone();
    theirs["user_id"] = json!("u2");
    theirs["conversation_id"] = json!(conversation);
    let (status, err) = s.post_run(&theirs).await;
    assert_eq!((status, code(&err)), (404, "not_found"), "{err}");
    assert_eq!(
        err["error"]["message"],
        format!("conversation {conversation} not found")
    );
    assert_eq!(s.stored_runs().await, 1, "nothing was written");
    assert_eq!(
        s.enqueuer.queue().depths().await.expect("depths").waiting,
        1,
        "nothing was enqueued"
    );

    let mut mine = first.clone();
    mine["conversation_id"] = json!(conversation);
    let (status, body) = s.post_run(&mine).await;
    assert_eq!(status, 202, "the owner goes on with it: {body}");
    let mut fresh = theirs.clone();
    fresh["conversation_id"] = json!("conv_of_u2");
    let (status, body) = s.post_run(&fresh).await;
    assert_eq!(
        status, 202,
        "a conversation nobody has is anyone's to open: {body}"
    );
}

#[tokio::test]
async fn where_a_user_is_named_another_users_run_is_not_found() {
    let Some(s) = Server::open().await else {
        return;
    };
    let run_id = awaiting_run(&s).await;
    let (status, _) = s.get_json(&format!("/v1/runs/{run_id}?user_id=u1")).await;
    assert_eq!(status, 200, "the owner sees it");
    let (status, _) = s.get_json(&format!("/v1/runs/{run_id}")).await;
    assert_eq!(status, 200, "an unscoped (operator) request sees it");
    for path in [
        format!("/v1/runs/{run_id}?user_id=u2"),
        format!("/v1/runs/{run_id}/events?user_id=u2"),
        format!("/v1/board/runs/{run_id}?user_id=u2"),
    ] {
        let (status, err) = s.get_json(&path).await;
        assert_eq!(
            (status, code(&err)),
            (404, "not_found"),
            "{path}: like a run that does not exist"
        );
        assert_eq!(
            err["error"]["message"],
            format!("run {run_id} not found"),
            "{path}: the same words as for no run"
        );
    }
    let resp = s
        .http
        .post(s.url(&format!("/v1/runs/{run_id}/approvals?user_id=u2")))
        .json_body(&json!({ "tool_call_id": "call_1", "decision": "approve" }))
        .send()
        .await
        .expect("POST");
    assert_eq!(
        resp.status().as_u16(),
        404,
        "nobody approves another's call"
    );
    assert_eq!(s.stored_runs().await, 1, "no continuation was enqueued");
    let (_, mine) = s.get_json("/v1/runs?user_id=u1").await;
    assert_eq!(mine["runs"].as_array().map(Vec::len), Some(1));
    let (_, theirs) = s.get_json("/v1/runs?user_id=u2").await;
    assert_eq!(theirs["runs"], json!([]));
    assert_eq!(theirs["counts"]["queued"], 0, "counts are the user's too");
    for bad in ["?user_id=", "?user=u1"] {
        let (status, err) = s.get_json(&format!("/v1/runs/{run_id}{bad}")).await;
        assert_eq!((status, code(&err)), (400, "invalid_request"), "{bad}");
    }
}
