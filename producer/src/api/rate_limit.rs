//! A request rate per credential (`FREEWAY_RATE_LIMIT` requests a second for a token, a
//! hundredth of that for a run's signed `events_url`; bursts of twice the rate): past it, `429`
//! with `Retry-After`.
//!
//! Every other limit of the API bounds what one request may hold (a body, a stream, a
//! connection); this one bounds how often a credential may ask, so a leaked run token or a web
//! app in a retry loop cannot take the producer's time from everyone else. A credential is the
//! token a request presents (the API, admin or metrics token, each counted apart) or the run a
//! signed `events_url` is for. A request without a credential is left to the token checks (an
//! open server has none, and listens on loopback only). The buckets are `request_rate`'s.

use super::error::ApiError;
use super::state::AppState;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::sync::Arc;

/// Middleware for every route: count the request against its credential.
pub async fn limit(State(state): State<Arc<AppState>>, request: Request, next: Next) -> Response {
    let credential = super::auth::credential(&state.tokens, request.headers()).or_else(|| {
        signed_run(request.uri().path(), request.uri().query()).map(|run| format!("run:{run}"))
    });
    if let Some(credential) = credential
        && let Err(retry_after_s) = state.rate_limits.take(&credential)
    {
        return ApiError::TooManyRequests { retry_after_s }.into_response();
    }
    next.run(request).await
}

/// The run of a signed `events_url` request (`/v1/runs/{id}/events?token=…`); checking the
/// token is the handler's.
fn signed_run<'a>(path: &'a str, query: Option<&str>) -> Option<&'a str> {
    let run = path.strip_prefix("/v1/runs/")?.strip_suffix("/events")?;
    let signed = query?.split('&').any(|pair| pair.starts_with("token="));
    (signed && freeway::job::is_id(run)).then_some(run)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_signed_events_url_names_its_run() {
        assert_eq!(
            signed_run("/v1/runs/run_1/events", Some("token=x")),
            Some("run_1")
        );
        assert_eq!(signed_run("/v1/runs/run_1/events", Some("user_id=u")), None);
        assert_eq!(signed_run("/v1/runs/run_1", Some("token=x")), None);
        assert_eq!(signed_run("/v1/runs/a b/events", Some("token=x")), None);
    }
}
