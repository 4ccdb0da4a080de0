//! The API's one error shape, `{"error":{"code":"…","message":"…"}}` (docs/api.md §1), with the
//! codes of docs/api.md §4 and their HTTP statuses, and the extractors that turn axum's own
//! rejections (bad JSON, a body over the limit, a bad path) into it.

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, PathRejection};
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use freeway::fleet::FleetError;
use freeway::run::Code;
use freeway::store::StoreError;
use queue::enqueue::EnqueueError;
use queue::schedule::QueueError;
use serde::Serialize;
use serde::de::DeserializeOwned;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApiError {
    #[error("{0}")]
    InvalidRequest(String),
    /// No token, or not the one configured.
    #[error("{0}")]
    Unauthorized(String),
    /// A valid token without the right (the operator's clear needs the admin token). Its code
    /// is `unauthorized`, as it was before `forbidden` existed; the status says 403.
    #[error("{0}")]
    Forbidden(String),
    /// Without an API token, a request that names a host other than this machine (a DNS
    /// rebinding page): 421, code `forbidden` (see [`super::origin`]).
    #[error("{0}")]
    ForeignHost(String),
    /// Without an API token, a request sent from a page of another site: 403, code `forbidden`.
    #[error("{0}")]
    CrossSiteOrigin(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    MethodNotAllowed(String),
    #[error("{0}")]
    Conflict(String),
    /// Another request with the same idempotency key is still being enqueued: 409, code
    /// `conflict`, with `Retry-After`.
    #[error("{message}; retry in {retry_after_s} s")]
    InFlight { message: String, retry_after_s: u64 },
    #[error("{0}")]
    PayloadTooLarge(String),
    /// The body did not arrive within [`super::state::BODY_TIMEOUT`]: 408, and the connection closes.
    #[error("{0}")]
    RequestTimeout(String),
    /// A body that is not JSON (see [`super::json_only`]).
    #[error("{0}")]
    UnsupportedMediaType(String),
    /// Every route rests and the run's `on_rest` is `refuse`.
    #[error("{}", refused_message(*code, *retry_after_s))]
    Refused { code: Code, retry_after_s: u64 },
    /// The server lacks a setting the request needs (`FREEWAY_SECRET_KEY`).
    #[error("{0}")]
    NotConfigured(String),
    /// Redis or the store failed; the detail is logged, not returned.
    #[error("{0}")]
    Unavailable(String),
    /// The server is at a limit of its own (open event streams): 503 with `Retry-After`.
    #[error("{message}; retry in {retry_after_s} s")]
    Busy { message: String, retry_after_s: u64 },
    /// The credential sent more requests than `FREEWAY_RATE_LIMIT` allows: 429 with
    /// `Retry-After`.
    #[error("too many requests with this credential; retry in {retry_after_s} s")]
    TooManyRequests { retry_after_s: u64 },
}

/// Every error's body: `{"error":{"code","message"}}`, with `retry_after_s` where the client
/// should wait (also sent as `Retry-After`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct ErrorDetail {
    pub code: ErrorCode,
    /// In plain words, for a person; never a secret or an internal detail.
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_after_s: Option<u64>,
}

/// The codes an HTTP error answers with (docs/api.md §4): a request's own, and the refusal of a
/// run whose routes are all closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    InvalidRequest,
    Unauthorized,
    Forbidden,
    NotFound,
    MethodNotAllowed,
    Conflict,
    PayloadTooLarge,
    RequestTimeout,
    UnsupportedMediaType,
    AccountResting,
    RoutesResting,
    SpendCapReached,
    NotConfigured,
    Unavailable,
    TooManyRequests,
}

fn refused_message(code: Code, retry_after_s: u64) -> String {
    let what = match code {
        Code::AccountResting => "the shared account is resting",
        Code::SpendCapReached => "only priced routes are open, and the spend cap is reached",
        _ => "every route of the chain is resting",
    };
    format!("{what}; retry in {retry_after_s} s")
}

impl ApiError {
    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::InvalidRequest(_) => StatusCode::BAD_REQUEST,
            ApiError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden(_) | ApiError::CrossSiteOrigin(_) => StatusCode::FORBIDDEN,
            ApiError::ForeignHost(_) => StatusCode::MISDIRECTED_REQUEST,
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::MethodNotAllowed(_) => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::Conflict(_) | ApiError::InFlight { .. } => StatusCode::CONFLICT,
            ApiError::PayloadTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::RequestTimeout(_) => StatusCode::REQUEST_TIMEOUT,
            ApiError::UnsupportedMediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ApiError::Refused { .. } | ApiError::TooManyRequests { .. } => {
                StatusCode::TOO_MANY_REQUESTS
            }
            ApiError::NotConfigured(_) | ApiError::Unavailable(_) | ApiError::Busy { .. } => {
                StatusCode::SERVICE_UNAVAILABLE
            }
        }
    }

    pub fn code(&self) -> ErrorCode {
        match self {
            ApiError::InvalidRequest(_) => ErrorCode::InvalidRequest,
            ApiError::Unauthorized(_) | ApiError::Forbidden(_) => ErrorCode::Unauthorized,
            ApiError::ForeignHost(_) | ApiError::CrossSiteOrigin(_) => ErrorCode::Forbidden,
            ApiError::NotFound(_) => ErrorCode::NotFound,
            ApiError::MethodNotAllowed(_) => ErrorCode::MethodNotAllowed,
            ApiError::Conflict(_) | ApiError::InFlight { .. } => ErrorCode::Conflict,
            ApiError::PayloadTooLarge(_) => ErrorCode::PayloadTooLarge,
            ApiError::RequestTimeout(_) => ErrorCode::RequestTimeout,
            ApiError::UnsupportedMediaType(_) => ErrorCode::UnsupportedMediaType,
            ApiError::Refused { code, .. } => match code {
                Code::AccountResting => ErrorCode::AccountResting,
                Code::SpendCapReached => ErrorCode::SpendCapReached,
                _ => ErrorCode::RoutesResting,
            },
            ApiError::NotConfigured(_) => ErrorCode::NotConfigured,
            ApiError::Unavailable(_) | ApiError::Busy { .. } => ErrorCode::Unavailable,
            ApiError::TooManyRequests { .. } => ErrorCode::TooManyRequests,
        }
    }

    /// The error as the body's `error` object says it.
    pub fn detail(&self) -> ErrorDetail {
        let retry_after_s = match self {
            ApiError::Refused { retry_after_s, .. }
            | ApiError::InFlight { retry_after_s, .. }
            | ApiError::Busy { retry_after_s, .. }
            | ApiError::TooManyRequests { retry_after_s } => Some(*retry_after_s),
            _ => None,
        };
        ErrorDetail {
            code: self.code(),
            message: self.to_string(),
            retry_after_s,
        }
    }

    /// An infrastructure fault: logged in full, answered with a generic message.
    pub fn unavailable(what: &str, error: &dyn std::fmt::Display) -> ApiError {
        tracing::error!(%error, "{what} failed");
        ApiError::Unavailable(format!("{what} is unavailable; try again"))
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let error = self.detail();
        let retry_after = error.retry_after_s;
        // A client past a limit, or too slow to send its body, gives its connection back: kept
        // open, it would hold one of the process's connections while it waits to retry.
        let close = retry_after.is_some() && !matches!(self, ApiError::Refused { .. })
            || matches!(self, ApiError::RequestTimeout(_));
        let body = ErrorBody { error };
        let mut response = (self.status(), Json(body)).into_response();
        if let Some(s) = retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(s));
        }
        if close {
            response
                .headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        response
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> ApiError {
        match e {
            StoreError::Invalid(m) => ApiError::InvalidRequest(m),
            StoreError::Conflict(m) => ApiError::Conflict(m),
            StoreError::NoSecretKey => ApiError::NotConfigured(e.to_string()),
            other => ApiError::unavailable("the store", &other),
        }
    }
}

impl From<EnqueueError> for ApiError {
    fn from(e: EnqueueError) -> ApiError {
        match e {
            EnqueueError::Invalid(e) => ApiError::InvalidRequest(e.to_string()),
            EnqueueError::NotFound(_)
            | EnqueueError::ConversationNotFound(_)
            | EnqueueError::ConnectionNotFound(_) => ApiError::NotFound(e.to_string()),
            EnqueueError::Conflict(m) => ApiError::Conflict(m),
            EnqueueError::KeyInFlight { retry_after_s, .. } => ApiError::InFlight {
                message: e.to_string(),
                retry_after_s,
            },
            EnqueueError::Store(s) => s.into(),
            EnqueueError::CorruptJob { .. } => ApiError::unavailable("the job copy", &e),
            EnqueueError::Redis(_) | EnqueueError::Event(_) | EnqueueError::Queue(_) => {
                ApiError::unavailable("redis", &e)
            }
        }
    }
}

/// Redis errors, whichever part of freeway met them, are an outage the client may retry.
macro_rules! redis_unavailable {
    ($($error:ty),+) => {$(
        impl From<$error> for ApiError {
            fn from(e: $error) -> ApiError {
                ApiError::unavailable("redis", &e)
            }
        }
    )+};
}

redis_unavailable!(redis::RedisError, FleetError, QueueError);

/// The request body as bytes, with axum's limit turned into `payload_too_large` and a body that
/// takes longer than [`super::state::BODY_TIMEOUT`] into `request_timeout` (a client trickling its body
/// a byte at a time held a connection as long as it liked).
pub struct Body(pub Bytes);

impl<S: Send + Sync> FromRequest<S> for Body {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        let read =
            tokio::time::timeout(super::state::BODY_TIMEOUT, Bytes::from_request(req, state));
        read.await
            .map_err(|_| {
                ApiError::RequestTimeout(format!(
                    "the body did not arrive within {} s",
                    super::state::BODY_TIMEOUT.as_secs()
                ))
            })?
            .map(Body)
            .map_err(|r: BytesRejection| {
                if r.status() == StatusCode::PAYLOAD_TOO_LARGE {
                    ApiError::PayloadTooLarge(format!(
                        "the body is larger than {} bytes",
                        super::state::BODY_LIMIT
                    ))
                } else {
                    ApiError::InvalidRequest(r.body_text())
                }
            })
    }
}

/// A JSON body: serde's message on a parse error, `payload_too_large` over the limit.
pub struct JsonBody<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        let Body(bytes) = Body::from_request(req, state).await?;
        serde_json::from_slice(&bytes)
            .map(JsonBody)
            .map_err(|e| ApiError::InvalidRequest(format!("body: {e}")))
    }
}

/// Path parameters, with a malformed path turned into `invalid_request`.
pub struct PathParams<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned + Send> FromRequestParts<S> for PathParams<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        axum::extract::Path::<T>::from_request_parts(parts, state)
            .await
            .map(|p| PathParams(p.0))
            .map_err(|r: PathRejection| ApiError::InvalidRequest(r.body_text()))
    }
}
