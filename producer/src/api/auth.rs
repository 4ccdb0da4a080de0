//! Bearer tokens (docs/api.md §1): `FREEWAY_API_TOKEN` guards every `/v1` route, and
//! `FREEWAY_ADMIN_TOKEN` the operator's rest clear. Tokens are compared in constant time and never
//! logged; the admin token also opens the `/v1` routes, so an operator needs one token.
//! `/metrics` needs a token once any guards it: the API token, or `FREEWAY_METRICS_TOKEN` for a
//! scraper that should hold nothing more (the API and admin tokens open it too).

use super::error::ApiError;
use super::state::AppState;
pub use super::state::Tokens;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, header};
use axum::middleware::Next;
use axum::response::Response;
use freeway::provider::ApiKey;
use std::sync::Arc;
use subtle::ConstantTimeEq;

/// What the `Authorization` header holds.
enum Presented<'a> {
    Nothing,
    Token(&'a str),
    Malformed,
}

fn presented(headers: &HeaderMap) -> Presented<'_> {
    let Some(value) = headers.get(header::AUTHORIZATION) else {
        return Presented::Nothing;
    };
    match value.to_str().ok().and_then(|v| v.strip_prefix("Bearer ")) {
        Some(token) if !token.trim().is_empty() => Presented::Token(token.trim()),
        _ => Presented::Malformed,
    }
}

fn matches(expected: Option<&ApiKey>, token: &str) -> bool {
    expected.is_some_and(|k| bool::from(k.expose().as_bytes().ct_eq(token.as_bytes())))
}

/// Middleware for `/v1`: with an API token configured, a request needs it (or the admin token).
pub async fn require_api_token(
    State(state): State<Arc<AppState>>,
    request: Request,
    next: Next,
) -> Result<Response, ApiError> {
    require_api(&state.tokens, request.headers())?;
    Ok(next.run(request).await)
}

/// With an API token configured, the API or the admin token; anything goes without one.
pub fn require_api(tokens: &Tokens, headers: &HeaderMap) -> Result<(), ApiError> {
    if tokens.api.is_some() {
        require_one_of(headers, &[tokens.api.as_ref(), tokens.admin.as_ref()])?;
    }
    Ok(())
}

/// Middleware for `/metrics`: open while no API or metrics token is set (the server is then
/// loopback only), else it needs one of the three tokens.
pub async fn require_metrics_token(
    State(state): State<Arc<AppState>>,
    request: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let tokens = &state.tokens;
    if tokens.api.is_some() || tokens.metrics.is_some() {
        let accepted = [&tokens.api, &tokens.admin, &tokens.metrics].map(Option::as_ref);
        require_one_of(request.headers(), &accepted)?;
    }
    Ok(next.run(request).await)
}

/// A bearer token among `accepted`; 401 otherwise.
fn require_one_of(headers: &HeaderMap, accepted: &[Option<&ApiKey>]) -> Result<(), ApiError> {
    match presented(headers) {
        Presented::Token(t) if accepted.iter().any(|&k| matches(k, t)) => Ok(()),
        Presented::Nothing => Err(ApiError::Unauthorized(
            "Authorization: Bearer <token> is required".into(),
        )),
        Presented::Token(_) | Presented::Malformed => Err(ApiError::Unauthorized(
            "the bearer token is not valid".into(),
        )),
    }
}

/// Which configured token the request presents, by role (`api`, `admin`, `metrics`): the
/// credential its request rate counts against. `None` for no token or an unknown one.
pub fn credential(tokens: &Tokens, headers: &HeaderMap) -> Option<String> {
    let Presented::Token(t) = presented(headers) else {
        return None;
    };
    [
        ("admin", &tokens.admin),
        ("api", &tokens.api),
        ("metrics", &tokens.metrics),
    ]
    .into_iter()
    .find(|(_, key)| matches(key.as_ref(), t))
    .map(|(role, _)| role.to_string())
}

/// Whether the request presents the admin token (the board then shows its operator as one).
pub fn presents_admin(tokens: &Tokens, headers: &HeaderMap) -> bool {
    matches!(presented(headers), Presented::Token(t) if matches(tokens.admin.as_ref(), t))
}

/// The admin token: 401 without a token, 403 with one that is not the admin token.
pub fn require_admin(tokens: &Tokens, headers: &HeaderMap) -> Result<(), ApiError> {
    let token = match presented(headers) {
        Presented::Token(t) => t,
        Presented::Nothing => {
            return Err(ApiError::Unauthorized(
                "Authorization: Bearer <FREEWAY_ADMIN_TOKEN> is required".into(),
            ));
        }
        Presented::Malformed => {
            return Err(ApiError::Unauthorized(
                "the bearer token is not valid".into(),
            ));
        }
    };
    if tokens.admin.is_none() {
        return Err(ApiError::Forbidden(
            "operator actions are disabled: FREEWAY_ADMIN_TOKEN is not set".into(),
        ));
    }
    if !matches(tokens.admin.as_ref(), token) {
        return Err(ApiError::Forbidden(
            "operator actions need the admin token (FREEWAY_ADMIN_TOKEN)".into(),
        ));
    }
    Ok(())
}
