//! `GET /openapi.json`: the API as an OpenAPI 3.1 document, generated from the handlers' own
//! `#[utoipa::path]` attributes and the request and response types they speak, so that a client
//! generated from it (docs/clients.md) cannot drift from the server. `tests/api/openapi.rs` walks the
//! router and fails on a route the document lacks.
//!
//! The errors every route shares (a bad token, a rate limit, an outage, a bad body) are added to
//! each operation here, once, rather than spelled out on every handler.

use super::error::ErrorBody;
use axum::Json;
use std::sync::LazyLock;
use utoipa::openapi::path::Operation;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme};
use utoipa::openapi::{Content, OpenApi as Document, Ref, RefOr, Response, ResponseBuilder};
use utoipa::{Modify, OpenApi};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "freeway",
        description = "Enqueue LLM runs, follow their events, and run the fleet. Every error is \
            `{\"error\":{\"code\",\"message\"}}`; `/v1` needs `Authorization: Bearer <FREEWAY_API_TOKEN>` \
            when the server has one, and a run's events also open with its signed `events_url`."
    ),
    paths(
        super::runs::create,
        super::runs::create_batch,
        super::runs::show,
        super::run_list::list,
        super::events::stream,
        super::approvals::create,
        super::run_actions::cancel,
        super::run_actions::retry,
        super::run_actions::wake,
        super::bulk::bulk,
        super::connections::put,
        super::connections::delete,
        super::rests::list,
        super::rests::clear,
        super::rests::pause,
        super::pools::pools,
        super::pools::providers,
        super::route_history::history,
        super::tenants::list,
        super::tenants::usage,
        super::audit::list,
        super::board::overview,
        super::board::run_detail,
        super::board::totals,
        super::board::page,
        super::health::healthz,
        super::metrics::metrics,
        document,
    ),
    components(schemas(ErrorBody, super::error::ErrorCode, freeway::run::Code)),
    modifiers(&SharedErrors),
    tags(
        (name = "runs", description = "Enqueue runs, read them and their events, act on one"),
        (name = "connections", description = "Users' own provider keys"),
        (name = "operations", description = "The operator's view and actions: rests, pools, tenants, audit"),
        (name = "board", description = "The job board's page and its data"),
        (name = "health", description = "Liveness and metrics"),
    )
)]
pub struct ApiDoc;

/// The document, built once.
static DOCUMENT: LazyLock<Document> = LazyLock::new(ApiDoc::openapi);

/// The OpenAPI 3.1 document of this API.
#[utoipa::path(
    get, operation_id = "openapi", path = "/openapi.json", tag = "health",
    responses((status = 200, description = "This document", content_type = "application/json", body = Object))
)]
pub async fn document() -> Json<&'static Document> {
    Json(&DOCUMENT)
}

/// The document as a value, for tests and tools.
pub fn spec() -> &'static Document {
    &DOCUMENT
}

/// Adds the shared errors to every operation, and the bearer token to the ones under `/v1`.
struct SharedErrors;

impl Modify for SharedErrors {
    fn modify(&self, doc: &mut Document) {
        let components = doc.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "api_token",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "FREEWAY_API_TOKEN (or FREEWAY_ADMIN_TOKEN for operator actions)",
                    ))
                    .build(),
            ),
        );
        for (path, item) in doc.paths.paths.iter_mut() {
            let v1 = path.starts_with("/v1/");
            let operations = [
                &mut item.get,
                &mut item.put,
                &mut item.post,
                &mut item.delete,
                &mut item.patch,
            ];
            // A run's events also open with its signed `events_url`, without the token.
            let signed = path.ends_with("/events");
            for operation in operations.into_iter().flatten() {
                add_shared_errors(operation, v1, signed);
            }
        }
    }
}

fn add_shared_errors(operation: &mut Operation, v1: bool, signed: bool) {
    let with_body = operation.request_body.is_some();
    let mut shared = vec![
        (
            "400",
            "invalid_request: a field, a query or a path is not acceptable",
        ),
        (
            "429",
            "too_many_requests: this credential is past FREEWAY_RATE_LIMIT",
        ),
        (
            "503",
            "unavailable (Redis or the store; retry) or not_configured",
        ),
        (
            "421",
            "forbidden: without an API token, a request for another host",
        ),
    ];
    if v1 {
        shared.push(("401", "unauthorized: no token, or not the one configured"));
        shared.push((
            "403",
            "unauthorized: the action needs the admin token; forbidden: another site's page",
        ));
        shared.push(("405", "method_not_allowed"));
        let mut security = vec![SecurityRequirement::new::<&str, [&str; 0], &str>(
            "api_token",
            [],
        )];
        if signed {
            security.push(SecurityRequirement::default());
        }
        operation.security = Some(security);
    }
    if with_body {
        shared.push(("408", "request_timeout: the body did not arrive in time"));
        shared.push(("413", "payload_too_large"));
        shared.push(("415", "unsupported_media_type: bodies are JSON"));
    }
    for (status, description) in shared {
        operation
            .responses
            .responses
            .entry(status.to_string())
            .or_insert_with(|| RefOr::T(error_response(description)));
    }
}

fn error_response(description: &str) -> Response {
    ResponseBuilder::new()
        .description(description)
        .content(
            "application/json",
            Content::new(Some(RefOr::<utoipa::openapi::schema::Schema>::Ref(
                Ref::from_schema_name("ErrorBody"),
            ))),
        )
        .build()
}
