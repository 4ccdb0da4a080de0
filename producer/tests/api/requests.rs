//! Requests refused before a handler reads them: bodies over 256 KiB, bodies that are not JSON,
//! unknown routes and wrong methods, each in the error envelope.

use crate::common::{JsonBody, SECRET_HEX, Server, json_of, run_body};
use crate::{awaiting_run, code, tokens};
use freeway::store::{SecretKey, Store};
use producer::api::auth::Tokens;
use serde_json::{Value, json};

#[tokio::test]
async fn a_body_over_256_kib_is_413() {
    let Some(s) = Server::open().await else {
        return;
    };
    let big =
        json!({ "user_id": "u1", "input": "x".repeat(256 * 1024), "routes": [{ "model": "m" }] });
    let resp = s
        .http
        .post(s.url("/v1/runs"))
        .json_body(&big)
        .send()
        .await
        .expect("POST");
    assert_eq!(resp.status().as_u16(), 413);
    let err: Value = json_of(resp).await;
    assert_eq!(code(&err), "payload_too_large");
    assert_eq!(s.stored_runs().await, 0);
}

#[tokio::test]
async fn unknown_routes_wrong_methods_and_unknown_runs_use_the_error_envelope() {
    let Some(s) = Server::open().await else {
        return;
    };
    let (status, err) = s.get_json("/nope").await;
    assert_eq!((status, code(&err)), (404, "not_found"));
    let (status, err) = s.get_json("/v1/runs/run_nope").await;
    assert_eq!((status, code(&err)), (404, "not_found"));
    let resp = s
        .http
        .delete(s.url("/v1/runs"))
        .send()
        .await
        .expect("DELETE");
    assert_eq!(resp.status().as_u16(), 405);
    let err: Value = json_of(resp).await;
    assert_eq!(code(&err), "method_not_allowed");
}

#[tokio::test]
async fn every_route_with_a_body_refuses_one_over_256_kib_with_413() {
    let Some(s) = Server::start(
        tokens(),
        Some(SecretKey::from_hex(SECRET_HEX).expect("key")),
    )
    .await
    else {
        return;
    };
    let run_id = "run_any";
    let big = "x".repeat(256 * 1024 + 1);
    for (method, path) in [
        (reqwest::Method::PUT, "/v1/connections/conn_1".to_string()),
        (
            reqwest::Method::POST,
            format!("/v1/runs/{run_id}/approvals"),
        ),
        (reqwest::Method::POST, "/v1/runs".to_string()),
    ] {
        let resp = s
            .http
            .request(method, s.url(&path))
            .bearer_auth("api-token-1")
            .header("content-type", "application/json")
            .body(big.clone())
            .send()
            .await
            .expect("send");
        assert_eq!(resp.status().as_u16(), 413, "{path}");
        let err: Value = json_of(resp).await;
        assert_eq!(code(&err), "payload_too_large", "{path}");
    }
}

/// What a browser's form post or `fetch` without a preflight can send: anything but JSON.
#[tokio::test]
async fn a_body_that_is_not_json_is_415_and_nothing_is_written() {
    let Some(s) = Server::start(
        Tokens::default(),
        Some(SecretKey::from_hex(SECRET_HEX).expect("key")),
    )
    .await
    else {
        return;
    };
    let run = run_body("u1", "vendor/m").to_string();
    let connection = json!({ "user_id": "u1", "provider": "openrouter", "api_key": "sk-x" });
    let approval = json!({ "tool_call_id": "call_1", "decision": "approve" });
    let run_id = awaiting_run(&s).await;
    let cases = [
        (reqwest::Method::POST, "/v1/runs".to_string(), run.clone()),
        (
            reqwest::Method::PUT,
            "/v1/connections/conn_a".to_string(),
            connection.to_string(),
        ),
        (
            reqwest::Method::POST,
            format!("/v1/runs/{run_id}/approvals"),
            approval.to_string(),
        ),
    ];
    for (method, path, body) in cases {
        for content_type in [
            Some("text/plain"),
            Some("text/plain; charset=utf-8"),
            Some("application/x-www-form-urlencoded"),
            Some("multipart/form-data; boundary=x"),
            Some("application/jsonp"),
            None,
        ] {
            let mut req = s
                .http
                .request(method.clone(), s.url(&path))
                .body(body.clone());
            if let Some(t) = content_type {
                req = req.header("content-type", t);
            }
            let resp = req.send().await.expect("send");
            assert_eq!(
                resp.status().as_u16(),
                415,
                "{method} {path} {content_type:?}"
            );
            let err: Value = json_of(resp).await;
            assert_eq!(code(&err), "unsupported_media_type", "{path}");
        }
    }
    assert_eq!(s.stored_runs().await, 1, "only the awaiting run");
    assert_eq!(
        s.enqueuer.queue().depths().await.expect("depths").waiting,
        1,
        "nothing was enqueued"
    );
    assert!(s.store.connection("conn_a").await.expect("read").is_none());

    // JSON is JSON whatever its parameters and case.
    for content_type in ["application/json; charset=utf-8", "Application/JSON"] {
        let resp = s
            .http
            .post(s.url("/v1/runs"))
            .header("content-type", content_type)
            .body(run.clone())
            .send()
            .await
            .expect("POST");
        assert_eq!(resp.status().as_u16(), 202, "{content_type}");
    }
    // A request without a body needs no content type.
    let resp = s
        .http
        .delete(s.url("/v1/connections/conn_a?user_id=u1"))
        .send()
        .await
        .expect("DELETE");
    assert_eq!(resp.status().as_u16(), 404);
}
