//! Route identity at the API: a request names only providers freeway knows and connections its
//! user owns; anything else is refused before a row, an event or a queue entry is written, so
//! no request can make freeway rest, circuit or spend what is not its own.

use crate::common;

use common::{JsonBody, SECRET_HEX, Server, json_of};
use freeway::store::SecretKey;
use producer::api::auth::Tokens;
use serde_json::{Value, json};

fn code(body: &Value) -> &str {
    body["error"]["code"].as_str().unwrap_or("<no code>")
}

async fn with_connections() -> Option<Server> {
    Server::start(
        Tokens::default(),
        Some(SecretKey::from_hex(SECRET_HEX).expect("hex")),
    )
    .await
}

async fn put_connection(s: &Server, id: &str, user: &str) -> u16 {
    s.http
        .put(s.url(&format!("/v1/connections/{id}")))
        .json_body(&json!({ "user_id": user, "provider": "openrouter", "api_key": "sk-alice-key" }))
        .send()
        .await
        .expect("PUT")
        .status()
        .as_u16()
}

/// Nothing of a refused request is anywhere: no run row, no queue entry, no key in Redis.
async fn assert_nothing_written(s: &Server) {
    assert_eq!(s.stored_runs().await, 0, "a run row was written");
    assert_eq!(
        s.enqueuer.queue().depths().await.expect("depths").waiting,
        0,
        "a job was enqueued"
    );
    assert!(s.keys("*").await.is_empty(), "{:?}", s.keys("*").await);
}

#[tokio::test]
async fn an_unknown_provider_is_400_and_nothing_is_written() {
    let Some(s) = Server::open().await else {
        return;
    };
    let body = json!({ "user_id": "u1", "input": "hi", "routes": [{ "model": "m", "provider": "nosuch" }] });
    let (status, err) = s.post_run(&body).await;
    assert_eq!((status, code(&err)), (400, "invalid_request"), "{err}");
    let message = err["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("routes[0]") && message.contains("nosuch"),
        "names the route and the provider: {message}"
    );
    assert_nothing_written(&s).await;
}

#[tokio::test]
async fn bob_cannot_name_alices_connection() {
    let Some(s) = with_connections().await else {
        return;
    };
    assert_eq!(put_connection(&s, "conn_alice", "alice").await, 204);
    let body = json!({ "user_id": "bob", "input": "hi",
        "routes": [{ "model": "vendor/paid", "connection": "conn_alice" }] });
    let (status, err) = s.post_run(&body).await;
    assert_eq!((status, code(&err)), (404, "not_found"), "{err}");
    assert_eq!(err["error"]["message"], "connection conn_alice not found");
    // A connection nobody has is refused the same way: bob learns nothing of alice's.
    let mut nobodys = body.clone();
    nobodys["routes"][0]["connection"] = json!("conn_nobody");
    let (status, err) = s.post_run(&nobodys).await;
    assert_eq!((status, code(&err)), (404, "not_found"), "{err}");
    assert_nothing_written(&s).await;

    let mut alices = body.clone();
    alices["user_id"] = json!("alice");
    let (status, body) = s.post_run(&alices).await;
    assert_eq!(status, 202, "the owner may use it: {body}");
}

#[tokio::test]
async fn connection_ids_cannot_pass_for_the_platform_or_a_provider() {
    let Some(s) = with_connections().await else {
        return;
    };
    for id in ["platform", "openrouter"] {
        let resp = s
            .http
            .put(s.url(&format!("/v1/connections/{id}")))
            .json_body(&json!({ "user_id": "u1", "provider": "openrouter", "api_key": "sk-x" }))
            .send()
            .await
            .expect("PUT");
        assert_eq!(resp.status().as_u16(), 400, "{id}");
        let err = json_of(resp).await;
        assert_eq!(code(&err), "invalid_request", "{id}: {err}");
    }
    let resp = s
        .http
        .put(s.url("/v1/connections/conn_x"))
        .json_body(&json!({ "user_id": "u1", "provider": "nosuch", "api_key": "sk-x" }))
        .send()
        .await
        .expect("PUT");
    assert_eq!(
        resp.status().as_u16(),
        400,
        "a connection names a known provider"
    );
    // A route naming `openrouter` as its connection is a user's connection nobody can own.
    let body = json!({ "user_id": "u1", "input": "hi",
        "routes": [{ "model": "m:free", "connection": "openrouter" }] });
    let (status, err) = s.post_run(&body).await;
    assert_eq!((status, code(&err)), (404, "not_found"), "{err}");
    assert_nothing_written(&s).await;
}

#[tokio::test]
async fn only_the_owner_deletes_a_connection() {
    let Some(s) = with_connections().await else {
        return;
    };
    assert_eq!(put_connection(&s, "conn_alice", "alice").await, 204);
    let delete = |query: &'static str| {
        s.http
            .delete(s.url(&format!("/v1/connections/conn_alice{query}")))
            .send()
    };
    let resp = delete("").await.expect("DELETE");
    assert_eq!(resp.status().as_u16(), 400, "the owner must be named");
    assert_eq!(
        delete("?user_id=bob")
            .await
            .expect("DELETE")
            .status()
            .as_u16(),
        404
    );
    let body = json!({ "user_id": "alice", "input": "hi",
        "routes": [{ "model": "vendor/paid", "connection": "conn_alice" }] });
    assert_eq!(s.post_run(&body).await.0, 202, "still alice's");
    assert_eq!(
        delete("?user_id=alice")
            .await
            .expect("DELETE")
            .status()
            .as_u16(),
        204
    );
}
