//! Bearer tokens (SPEC §5.1): `FREEWAY_API_TOKEN` guards every `/v1` route, and
//! `FREEWAY_ADMIN_TOKEN` the operator's rest clear. Tokens are compared in constant time and never
//! logged; the admin token also opens the `/v1` routes, so an operator needs one token.

use super::AppState;
use super::error::ApiError;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, header};
use axum::middleware::Next;
use axum::response::Response;
use freeway::provider::ApiKey;
use std::sync::Arc;
use subtle::ConstantTimeEq;

/// The tokens the API accepts. `Debug` never shows them (`ApiKey` is redacted).
#[derive(Debug, Clone, Default)]
pub struct Tokens {
    /// `FREEWAY_API_TOKEN`; `None` leaves `/v1` open (the server then binds loopback only).
    pub api: Option<ApiKey>,
    /// `FREEWAY_ADMIN_TOKEN`; `None` disables the operator's clear.
    pub admin: Option<ApiKey>,
}

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
    let tokens = &state.tokens;
    if tokens.api.is_some() {
        match presented(request.headers()) {
            Presented::Token(t) if matches(tokens.api.as_ref(), t) => {}
            Presented::Token(t) if matches(tokens.admin.as_ref(), t) => {}
            Presented::Nothing => {
                return Err(ApiError::Unauthorized(
                    "Authorization: Bearer <token> is required".into(),
                ));
            }
            Presented::Token(_) | Presented::Malformed => {
                return Err(ApiError::Unauthorized(
                    "the bearer token is not valid".into(),
                ));
            }
        }
    }
    Ok(next.run(request).await)
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
            "the operator's clear is disabled: FREEWAY_ADMIN_TOKEN is not set".into(),
        ));
    }
    if !matches(tokens.admin.as_ref(), token) {
        return Err(ApiError::Forbidden(
            "clearing a rest needs the admin token (FREEWAY_ADMIN_TOKEN)".into(),
        ));
    }
    Ok(())
}
