//! The `/_sim/…` control API: faults, call log, reset, clock, live settings and prices.
//!
//! Tests and the demo drive the simulator over HTTP when it runs as a separate process; the
//! in-process [`crate::SimHandle`] offers the same operations. Every malformed control request
//! gets a 400 `{"error":{"code":"invalid_request","message":…}}` naming what is wrong.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::json;

use crate::config::ConfigPatch;
use crate::faults::FaultSpec;
use crate::price::Price;
use crate::state::Shared;

pub(crate) fn routes() -> Router<Arc<Shared>> {
    Router::new()
        .route(
            "/_sim/faults",
            get(list_faults).post(add_fault).delete(clear_faults),
        )
        .route("/_sim/calls", get(calls))
        .route("/_sim/reset", post(reset))
        .route("/_sim/clock", get(clock).post(advance_clock))
        .route("/_sim/config", get(config).post(patch_config))
        .route("/_sim/prices", get(prices).post(set_prices))
}

fn invalid(message: impl Into<String>) -> Response {
    let body = json!({"error": {"code": "invalid_request", "message": message.into()}});
    (StatusCode::BAD_REQUEST, Json(body)).into_response()
}

fn parse<T: DeserializeOwned>(body: &[u8]) -> Result<T, String> {
    serde_json::from_slice(body).map_err(|e| format!("invalid JSON body: {e}"))
}

async fn add_fault(State(sim): State<Arc<Shared>>, body: Bytes) -> Response {
    let spec: FaultSpec = match parse(&body) {
        Ok(spec) => spec,
        Err(message) => return invalid(message),
    };
    if let Err(message) = spec.validate() {
        return invalid(message);
    }
    let id = sim.add_fault(spec);
    (StatusCode::CREATED, Json(json!({ "id": id }))).into_response()
}

async fn list_faults(State(sim): State<Arc<Shared>>) -> Response {
    Json(sim.faults()).into_response()
}

async fn clear_faults(State(sim): State<Arc<Shared>>) -> Response {
    Json(json!({ "cleared": sim.clear_faults() })).into_response()
}

async fn calls(State(sim): State<Arc<Shared>>, RawQuery(query): RawQuery) -> Response {
    let mut since_ms = 0;
    for pair in query
        .as_deref()
        .unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty())
    {
        match pair.split_once('=') {
            Some(("since_ms", v)) => match v.parse() {
                Ok(ms) => since_ms = ms,
                Err(_) => {
                    return invalid(format!(
                        "since_ms must be epoch milliseconds (an unsigned integer), got `{v}`"
                    ));
                }
            },
            _ => {
                return invalid(format!(
                    "unknown query parameter `{pair}` (expected since_ms)"
                ));
            }
        }
    }
    Json(sim.calls(since_ms)).into_response()
}

async fn reset(State(sim): State<Arc<Shared>>) -> Response {
    sim.reset();
    Json(json!({ "reset": true })).into_response()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Advance {
    advance_ms: u64,
}

async fn clock(State(sim): State<Arc<Shared>>) -> Response {
    Json(json!({ "now_ms": sim.now_ms() })).into_response()
}

async fn advance_clock(State(sim): State<Arc<Shared>>, body: Bytes) -> Response {
    match parse::<Advance>(&body) {
        Ok(a) => Json(json!({ "now_ms": sim.advance_clock(a.advance_ms) })).into_response(),
        Err(message) => invalid(message),
    }
}

async fn config(State(sim): State<Arc<Shared>>) -> Response {
    Json(sim.config()).into_response()
}

async fn patch_config(State(sim): State<Arc<Shared>>, body: Bytes) -> Response {
    let patch: ConfigPatch = match parse(&body) {
        Ok(p) => p,
        Err(message) => return invalid(message),
    };
    match sim.patch_config(&patch) {
        Ok(config) => Json(config).into_response(),
        Err(message) => invalid(message),
    }
}

async fn prices(State(sim): State<Arc<Shared>>) -> Response {
    Json(sim.prices()).into_response()
}

/// `{"MODEL": {"input": USD, "output": USD}, …}` per million tokens, `*` the default; all or
/// none are set.
async fn set_prices(State(sim): State<Arc<Shared>>, body: Bytes) -> Response {
    let prices: BTreeMap<String, Price> = match parse(&body) {
        Ok(p) => p,
        Err(message) => return invalid(message),
    };
    match sim.set_prices(prices.iter().map(|(m, p)| (m.as_str(), *p))) {
        Ok(all) => Json(all).into_response(),
        Err(message) => invalid(message),
    }
}
