//! Users' provider connections (`/v1/connections`): the key stored sealed and never echoed, and
//! refused while no secret key is configured.

use crate::code;
use crate::common::{JsonBody, SECRET_HEX, Server, json_of};
use freeway::store::{SecretKey, Store};
use producer::api::auth::Tokens;
use serde_json::{Value, json};

#[tokio::test]
async fn a_connection_key_is_stored_sealed_and_never_echoed() {
    const KEY: &str = "sk-user-very-secret-0123456789";
    let Some(s) = Server::start(
        Tokens::default(),
        Some(SecretKey::from_hex(SECRET_HEX).expect("hex")),
    )
    .await
    else {
        return;
    };
    let put = |user: &str| {
        s.http
            .put(s.url("/v1/connections/conn_a"))
            .json_body(&json!({ "user_id": user, "provider": "openrouter", "api_key": KEY }))
            .send()
    };
    let resp = put("u1").await.expect("PUT");
    assert_eq!(resp.status().as_u16(), 204);
    assert!(resp.text().await.expect("body").is_empty());
    let info = s
        .store
        .connection("conn_a")
        .await
        .expect("read")
        .expect("stored");
    assert_eq!(
        (info.user_id.as_str(), info.provider.as_str()),
        ("u1", "openrouter")
    );
    for file in ["freeway.db", "freeway.db-wal"] {
        let bytes = std::fs::read(s.db_path.with_file_name(file)).unwrap_or_default();
        assert!(
            !String::from_utf8_lossy(&bytes).contains(KEY),
            "{file} holds the key"
        );
    }
    // Someone else's id.
    let resp = put("u2").await.expect("PUT");
    assert_eq!(resp.status().as_u16(), 409);
    assert!(!resp.text().await.expect("body").contains(KEY));
    let resp = s
        .http
        .put(s.url("/v1/connections/conn_b"))
        .json_body(&json!({ "user_id": "u1", "provider": "openrouter" }))
        .send()
        .await
        .expect("PUT");
    assert_eq!(resp.status().as_u16(), 400);

    let delete = |query: &str| {
        s.http
            .delete(s.url(&format!("/v1/connections/conn_a{query}")))
            .send()
    };
    assert_eq!(
        delete("?user_id=u2")
            .await
            .expect("DELETE")
            .status()
            .as_u16(),
        404
    );
    assert_eq!(
        delete("?user_id=u1")
            .await
            .expect("DELETE")
            .status()
            .as_u16(),
        204
    );
    assert!(s.store.connection("conn_a").await.expect("read").is_none());
    assert_eq!(
        delete("?user_id=u1")
            .await
            .expect("DELETE")
            .status()
            .as_u16(),
        404
    );
}

#[tokio::test]
async fn connections_need_the_secret_key() {
    let Some(s) = Server::open().await else {
        return;
    };
    let resp = s
        .http
        .put(s.url("/v1/connections/conn_a"))
        .json_body(&json!({ "user_id": "u1", "provider": "openrouter", "api_key": "sk-x" }))
        .send()
        .await
        .expect("PUT");
    assert_eq!(resp.status().as_u16(), 503);
    let err: Value = json_of(resp).await;
    assert_eq!(code(&err), "not_configured");
    assert!(s.store.connection("conn_a").await.expect("read").is_none());
}
