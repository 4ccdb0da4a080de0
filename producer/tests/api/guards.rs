//! Who may call: the API, admin and metrics tokens and, without a token, the guard against a
//! foreign `Host` (DNS rebinding) and a cross-site `Origin`.

use crate::common::{JsonBody, Server, json_of, run_body};
use crate::{code, tokens};
use freeway::provider::ApiKey;
use producer::api::auth::Tokens;
use serde_json::Value;

#[tokio::test]
async fn with_an_api_token_every_v1_route_needs_it() {
    let Some(s) = Server::start(tokens(), None).await else {
        return;
    };
    for auth in [
        None,
        Some("Bearer wrong"),
        Some("api-token-1"),
        Some("Basic x"),
    ] {
        let mut req = s.http.get(s.url("/v1/rests"));
        if let Some(a) = auth {
            req = req.header("authorization", a);
        }
        let resp = req.send().await.expect("GET");
        assert_eq!(resp.status().as_u16(), 401, "{auth:?}");
        let err: Value = json_of(resp).await;
        assert_eq!(code(&err), "unauthorized");
    }
    let resp = s
        .http
        .post(s.url("/v1/runs"))
        .json_body(&run_body("u1", "m"))
        .send()
        .await
        .expect("POST");
    assert_eq!(resp.status().as_u16(), 401);
    assert_eq!(s.stored_runs().await, 0);
    for token in ["api-token-1", "admin-token-1"] {
        let resp = s
            .http
            .get(s.url("/v1/rests"))
            .bearer_auth(token)
            .send()
            .await
            .expect("GET");
        assert_eq!(resp.status().as_u16(), 200, "{token}");
    }
    // Outside /v1: no token needed.
    let resp = s.http.get(s.url("/healthz")).send().await.expect("GET");
    assert_eq!(resp.status().as_u16(), 200);
}

/// A GET with this `Host` (or `Origin`) header: `(status, JSON body)`.
async fn get_with(s: &Server, path: &str, header: &str, value: &str) -> (u16, Value) {
    let resp = s
        .http
        .get(s.url(path))
        .header(header, value)
        .send()
        .await
        .expect("GET");
    let status = resp.status().as_u16();
    (status, json_of(resp).await)
}

const FOREIGN_HOSTS: [&str; 7] = [
    "evil.example",
    "evil.example:8080",
    "127.0.0.1.evil.example",
    "localhost.evil.example",
    "10.0.0.1",
    "[::2]:8080",
    "localhost:x",
];

#[tokio::test]
async fn a_foreign_host_is_421_and_a_cross_site_origin_403_unless_a_token_guards_the_api() {
    let Some(s) = Server::open().await else {
        return;
    };
    // Every route, the board and the probes included: a rebound name reaches none of them.
    for path in ["/v1/rests", "/board", "/metrics", "/healthz", "/nope"] {
        for host in FOREIGN_HOSTS {
            let (status, err) = get_with(&s, path, "host", host).await;
            assert_eq!((status, code(&err)), (421, "forbidden"), "{path} {host}");
        }
    }
    for origin in [
        "https://evil.example",
        "http://localhost.evil.example:8080",
        "http://127.0.0.1.evil.example",
        "null",
    ] {
        let (status, err) = get_with(&s, "/v1/rests", "origin", origin).await;
        assert_eq!((status, code(&err)), (403, "forbidden"), "{origin}");
        let resp = s
            .http
            .post(s.url("/v1/runs"))
            .header("origin", origin)
            .json_body(&run_body("u1", "vendor/m"))
            .send()
            .await
            .expect("POST");
        assert_eq!(resp.status().as_u16(), 403, "{origin}");
    }
    let resp = s
        .http
        .post(s.url("/v1/runs"))
        .header("host", "evil.example")
        .json_body(&run_body("u1", "vendor/m"))
        .send()
        .await
        .expect("POST");
    assert_eq!(resp.status().as_u16(), 421);
    assert_eq!(s.stored_runs().await, 0, "nothing was written");
    assert!(s.keys("job:*").await.is_empty(), "nothing was enqueued");

    for host in [
        "localhost",
        "LocalHost:8080",
        "127.0.0.1",
        "127.1.2.3:9",
        "[::1]",
        "[::1]:8080",
    ] {
        let (status, body) = get_with(&s, "/v1/rests", "host", host).await;
        assert_eq!(status, 200, "{host}: {body}");
    }
    for origin in [
        "http://localhost:3000",
        "http://127.0.0.1:8080",
        "https://[::1]",
    ] {
        let (status, body) = get_with(&s, "/v1/rests", "origin", origin).await;
        assert_eq!(status, 200, "{origin}: {body}");
    }

    // With a token, the token is the protection: a proxy's name and a web app's origin pass.
    let Some(s) = Server::start(tokens(), None).await else {
        return;
    };
    for (header, value) in [
        ("host", "freeway.example.com"),
        ("origin", "https://app.example.com"),
    ] {
        let resp = s
            .http
            .get(s.url("/v1/rests"))
            .header(header, value)
            .bearer_auth("api-token-1")
            .send()
            .await
            .expect("GET");
        assert_eq!(resp.status().as_u16(), 200, "{header}: {value}");
        let (status, err) = get_with(&s, "/v1/rests", header, value).await;
        assert_eq!((status, code(&err)), (401, "unauthorized"), "{header}");
    }
}

#[tokio::test]
async fn with_an_api_or_metrics_token_metrics_need_a_token() {
    let Some(s) = Server::start(tokens(), None).await else {
        return;
    };
    for auth in [None, Some("Bearer wrong")] {
        let mut req = s.http.get(s.url("/metrics"));
        if let Some(a) = auth {
            req = req.header("authorization", a);
        }
        let resp = req.send().await.expect("GET");
        assert_eq!(resp.status().as_u16(), 401, "{auth:?}");
        let err: Value = json_of(resp).await;
        assert_eq!(code(&err), "unauthorized");
    }
    for token in ["api-token-1", "admin-token-1"] {
        let resp = s
            .http
            .get(s.url("/metrics"))
            .bearer_auth(token)
            .send()
            .await
            .expect("GET");
        assert_eq!(resp.status().as_u16(), 200, "{token}");
        assert!(
            resp.text()
                .await
                .expect("text")
                .contains("freeway_queue_jobs")
        );
    }

    // A scraper's own token opens /metrics, and nothing else.
    let Some(s) = Server::start(
        Tokens {
            metrics: Some(ApiKey::new("metrics-token-1")),
            ..tokens()
        },
        None,
    )
    .await
    else {
        return;
    };
    let metrics = |token: Option<&'static str>| {
        let mut req = s.http.get(s.url("/metrics"));
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        req.send()
    };
    assert_eq!(metrics(None).await.expect("GET").status().as_u16(), 401);
    let resp = metrics(Some("metrics-token-1")).await.expect("GET");
    assert_eq!(resp.status().as_u16(), 200);
    let resp = s
        .http
        .get(s.url("/v1/rests"))
        .bearer_auth("metrics-token-1")
        .send()
        .await
        .expect("GET");
    assert_eq!(
        resp.status().as_u16(),
        401,
        "the metrics token opens no /v1 route"
    );

    // A metrics token alone guards /metrics too.
    let Some(s) = Server::start(
        Tokens {
            metrics: Some(ApiKey::new("metrics-token-1")),
            ..Tokens::default()
        },
        None,
    )
    .await
    else {
        return;
    };
    let resp = s.http.get(s.url("/metrics")).send().await.expect("GET");
    assert_eq!(resp.status().as_u16(), 401);
    let resp = s
        .http
        .get(s.url("/metrics"))
        .bearer_auth("metrics-token-1")
        .send()
        .await
        .expect("GET");
    assert_eq!(resp.status().as_u16(), 200);
}
