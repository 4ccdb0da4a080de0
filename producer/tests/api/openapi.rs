//! `GET /openapi.json` (docs/api.md §1): the document covers every route the router serves,
//! each with the methods it answers, and no route it does not; its schemas carry every error
//! code and every event type.

use super::common::Server;
use serde_json::Value;
use std::collections::BTreeSet;

const METHODS: [&str; 5] = ["GET", "POST", "PUT", "DELETE", "PATCH"];

/// The router's own paths, read from its `Debug` form (axum lists the paths of its routes
/// there; it has no other way to ask). The fallback router's entries are not routes.
fn router_paths(server: &Server) -> BTreeSet<String> {
    let shown = format!("{:?}", producer::api::router(server.state.clone()));
    let routes = shown
        .split("fallback_router")
        .next()
        .expect("split yields at least one part");
    // The node's entries are `RouteId(n): "/path"`; the routes' are `RouteId(n): MethodRouter…`.
    let paths: BTreeSet<String> = routes
        .split("RouteId(")
        .skip(1)
        .filter_map(|entry| {
            let (_, after) = entry.split_once("): \"")?;
            Some(after.split('"').next()?.to_string())
        })
        .collect();
    assert!(
        paths.len() >= 20,
        "the router's Debug form no longer lists its paths: {paths:?}"
    );
    paths
}

/// A path of the router as the document spells it (`{*key}` is a `{key}` that may hold `/`).
fn documented(path: &str) -> String {
    path.replace("{*", "{")
}

/// A request path that matches the route: every parameter filled.
fn concrete(path: &str) -> String {
    path.split('/')
        .map(|segment| match segment.starts_with('{') {
            true => "x",
            false => segment,
        })
        .collect::<Vec<_>>()
        .join("/")
}

/// The methods the router answers on `path`: every one it does not answer with its 405.
async fn methods_served(server: &Server, path: &str) -> BTreeSet<String> {
    let mut served = BTreeSet::new();
    for method in METHODS {
        let request = server.http.request(
            method.parse().expect("a method"),
            server.url(&concrete(path)),
        );
        let request = match method {
            "GET" | "DELETE" => request,
            _ => request
                .header("content-type", "application/json")
                .body("{}"),
        };
        let response = request.send().await.expect("the API answers");
        let status = response.status().as_u16();
        let text = response.text().await.expect("a body");
        let body: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        if status != 405 || body["error"]["code"] != "method_not_allowed" {
            served.insert(method.to_string());
        }
    }
    served
}

async fn document(server: &Server) -> Value {
    let response = server
        .http
        .get(server.url("/openapi.json"))
        .send()
        .await
        .expect("the API answers");
    assert_eq!(response.status(), 200);
    super::common::json_of(response).await
}

#[tokio::test]
async fn the_document_lists_every_route_with_the_methods_it_answers() {
    let Some(server) = Server::open().await else {
        return;
    };
    let doc = document(&server).await;
    assert_eq!(doc["openapi"], "3.1.0");
    let mut in_router = BTreeSet::new();
    for path in router_paths(&server) {
        for method in methods_served(&server, &path).await {
            in_router.insert((documented(&path), method));
        }
    }
    let mut in_document = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for method in METHODS {
            if item.get(method.to_lowercase()).is_some() {
                in_document.insert((path.clone(), method.to_string()));
            }
        }
    }
    let missing: Vec<_> = in_router.difference(&in_document).collect();
    let extra: Vec<_> = in_document.difference(&in_router).collect();
    assert!(missing.is_empty(), "routes the document lacks: {missing:?}");
    assert!(extra.is_empty(), "operations no route serves: {extra:?}");
}

#[tokio::test]
async fn every_operation_answers_errors_in_the_one_error_shape() {
    let Some(server) = Server::open().await else {
        return;
    };
    let doc = document(&server).await;
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for (method, operation) in item.as_object().expect("an item") {
            let responses = operation["responses"].as_object().expect("responses");
            assert!(responses.contains_key("503"), "{method} {path} lacks 503");
            for status in ["400", "429"] {
                let schema = &responses
                    .get(status)
                    .unwrap_or_else(|| panic!("{method} {path} lacks {status}"))["content"]["application/json"]
                    ["schema"]["$ref"];
                assert_eq!(schema, "#/components/schemas/ErrorBody", "{method} {path}");
            }
            if path.starts_with("/v1/") {
                assert!(responses.contains_key("401"), "{method} {path} lacks 401");
            }
        }
    }
}

#[tokio::test]
async fn the_schemas_name_every_error_code_and_every_event_type() {
    let Some(server) = Server::open().await else {
        return;
    };
    let doc = document(&server).await;
    let schemas = &doc["components"]["schemas"];
    let codes: BTreeSet<&str> = schemas["ErrorCode"]["enum"]
        .as_array()
        .expect("ErrorCode is an enum")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    for code in [
        "invalid_request",
        "unauthorized",
        "forbidden",
        "not_found",
        "conflict",
        "payload_too_large",
        "unsupported_media_type",
        "unavailable",
        "account_resting",
        "routes_resting",
        "spend_cap_reached",
    ] {
        assert!(codes.contains(code), "ErrorCode lacks {code}: {codes:?}");
    }
    let run_codes = schemas["Code"].to_string();
    for code in [
        "deadline_exceeded",
        "routes_exhausted",
        "budget_exhausted",
        "connection_missing",
    ] {
        assert!(run_codes.contains(code), "Code lacks {code}");
    }
    let events = schemas["Event"].to_string();
    for kind in [
        "queued",
        "delayed",
        "started",
        "waiting",
        "attempt",
        "failover",
        "delta",
        "tool_call",
        "tool_result",
        "awaiting_approval",
        "refused",
        "finished",
        "cancelled",
    ] {
        assert!(
            events.contains(&format!("\"{kind}\"")),
            "the Event schema lacks {kind}"
        );
    }
}
