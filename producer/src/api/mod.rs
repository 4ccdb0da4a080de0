//! The HTTP API of docs/api.md §1 on axum: thin handlers over [`queue::enqueue::Enqueuer`], the
//! store and Redis, with the state passed explicitly in [`AppState`] (tests build one per test,
//! with their own namespace and tokens, and serve [`router`] in-process).
//!
//! Every error is `{"error":{"code","message"}}` ([`error::ApiError`]), including unknown routes,
//! wrong methods, bad JSON and bodies over [`BODY_LIMIT`].
//!
//! Security (docs/design.md §6): a bearer token on `/v1` ([`auth`], constant-time comparisons), the
//! admin token on the operator's clear, no non-loopback bind without a token (`producer serve`), a
//! body limit on every route, and `?user_id=` scoping of run routes ([`user`]). The board's page
//! ([`board`]) is served without a token but holds no data; its data comes from `/v1/board/…`.
//! Bodies on `/v1` must be JSON ([`json_only`]), `/metrics` needs a token once one is set, and
//! without an API token every route refuses other hosts and other sites' pages ([`origin`]). Open
//! event streams are capped ([`AppState::stream_slots`]) and share one Redis reader
//! ([`crate::hub`]).

pub mod approvals;
pub mod audit;
pub mod auth;
pub mod board;
pub mod bulk;
pub mod connections;
pub mod error;
pub mod events;
pub mod health;
pub mod json_only;
pub mod metrics;
pub mod openapi;
pub mod origin;
pub mod pools;
pub mod rate_limit;
pub mod request_rate;
pub mod rests;
pub mod route_history;
pub mod run_actions;
pub mod run_list;
pub mod runs;
pub mod state;
pub mod stream_slots;
pub mod tenants;
pub mod totals;
pub mod user;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::{Method, Uri};
use axum::middleware;
use axum::routing::{delete, get, post, put};
use error::ApiError;
pub use state::{AppState, BATCH_BODY_LIMIT, BODY_LIMIT, BODY_TIMEOUT};
use std::sync::Arc;

/// The API's routes on `state`.
pub fn router(state: Arc<AppState>) -> Router {
    let v1 = Router::new()
        .route("/runs", post(runs::create).get(run_list::list))
        .route(
            "/runs:batch",
            post(runs::create_batch).layer(DefaultBodyLimit::max(BATCH_BODY_LIMIT)),
        )
        .route("/runs:bulk", post(bulk::bulk))
        .route("/runs/{id}", get(runs::show))
        .route("/runs/{id}/approvals", post(approvals::create))
        .route("/runs/{id}/cancel", post(run_actions::cancel))
        .route("/runs/{id}/retry", post(run_actions::retry))
        .route("/runs/{id}/wake", post(run_actions::wake))
        .route(
            "/connections/{id}",
            put(connections::put).delete(connections::delete),
        )
        .route("/rests", get(rests::list))
        .route("/pools", get(pools::pools))
        .route("/providers", get(pools::providers))
        .route("/routes", get(route_history::history))
        .route("/tenants", get(tenants::list))
        .route("/tenants/{id}/usage", get(tenants::usage))
        .route(
            "/rests/{scope}/{*key}",
            delete(rests::clear).post(rests::pause),
        )
        .route("/audit", get(audit::list))
        .route("/board/overview", get(board::overview))
        .route("/board/runs/{id}", get(board::run_detail))
        .route("/board/totals", get(board::totals))
        .route_layer(middleware::from_fn(json_only::require_json))
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            auth::require_api_token,
        ));
    // A run's events open with the API token or with the run's signed `events_url`, which the
    // handler checks itself.
    let events = Router::new().route("/runs/{id}/events", get(events::stream));
    Router::new()
        .nest("/v1", v1.merge(events))
        .route("/board", get(board::page))
        .route("/openapi.json", get(openapi::document))
        .route("/healthz", get(health::healthz))
        .route(
            "/metrics",
            get(metrics::metrics).route_layer(middleware::from_fn_with_state(
                state.clone(),
                auth::require_metrics_token,
            )),
        )
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            rate_limit::limit,
        ))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            origin::loopback_only,
        ))
        .with_state(state)
}

async fn not_found(uri: Uri) -> ApiError {
    ApiError::NotFound(format!("no route for {}", uri.path()))
}

async fn method_not_allowed(method: Method, uri: Uri) -> ApiError {
    ApiError::MethodNotAllowed(format!("{method} is not allowed on {}", uri.path()))
}
