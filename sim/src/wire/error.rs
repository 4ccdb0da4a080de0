//! The error envelope every refusal shares, and the refusals of a request that never reaches
//! a model (no key, a body the simulator cannot serve).
//!
//! OpenRouter's error bodies grew fields during 2025 and 2026 (docs/providers.md §2.1), so
//! `Metadata` holds every key any capture has, each skipped when unset, and `ErrorObj::shaped`
//! drops the 2026 additions for the 2025 shape. `ErrorReply` keeps status, headers and body
//! together so a caller cannot send the `X-RateLimit-*` headers without their echo in the body.

use axum::body::Bytes;
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::ser::SerializeMap;
use serde::{Serialize, Serializer};

use super::{data_frame, json_response, to_json};
use crate::config::Shape;
use crate::faults::ErrorCode;
use crate::ids;

// HTTP/1 header names are case-insensitive and hyper writes them in lowercase; the mixed-case
// spelling clients see in captures survives in the `metadata.headers` echo.
const X_RATELIMIT_LIMIT: HeaderName = HeaderName::from_static("x-ratelimit-limit");
const X_RATELIMIT_REMAINING: HeaderName = HeaderName::from_static("x-ratelimit-remaining");
const X_RATELIMIT_RESET: HeaderName = HeaderName::from_static("x-ratelimit-reset");

/// `error.metadata.headers`: the rate-limit headers echoed with their mixed-case names.
#[derive(Debug, Default)]
pub(super) struct HeaderEcho(pub(super) Vec<(&'static str, String)>);

impl Serialize for HeaderEcho {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

/// `error.metadata`; keys are written in the order of the free-tier and upstream captures
/// (docs/providers.md §2.2, §2.4).
#[derive(Debug, Default, Serialize)]
pub(super) struct Metadata {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) headers: Option<HeaderEcho>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) raw: Option<String>,
    /// `Some(None)` is the explicit `null` of platform errors.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) provider_name: Option<Option<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) is_byok: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) reason: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) error_type: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) provider_code: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) reasons: Option<[&'static str; 1]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) flagged_input: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) model_slug: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) limit_source: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) remedy_hint: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) retry_after_seconds: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) retry_after_seconds_raw: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) previous_errors: Option<serde_json::Value>,
}

impl Metadata {
    fn is_empty(&self) -> bool {
        self.headers.is_none()
            && self.raw.is_none()
            && self.provider_name.is_none()
            && self.is_byok.is_none()
            && self.reason.is_none()
            && self.error_type.is_none()
            && self.provider_code.is_none()
            && self.reasons.is_none()
            && self.flagged_input.is_none()
            && self.model_slug.is_none()
            && self.limit_source.is_none()
            && self.remedy_hint.is_none()
            && self.retry_after_seconds.is_none()
            && self.retry_after_seconds_raw.is_none()
            && self.previous_errors.is_none()
    }
}

/// The `error` object. `code` is absent only in the documented availability error
/// (docs/providers.md §2.4).
#[derive(Debug, Default, Serialize)]
pub(crate) struct ErrorObj {
    pub(super) message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) code: Option<ErrorCode>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) error_type: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) http_status: Option<u16>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) availability: Option<serde_json::Value>,
    #[serde(skip_serializing_if = "Metadata::is_empty")]
    pub(super) metadata: Metadata,
}

impl ErrorObj {
    pub(super) fn new(code: u16, message: impl Into<String>) -> ErrorObj {
        ErrorObj {
            message: message.into(),
            code: Some(ErrorCode::Number(code)),
            ..ErrorObj::default()
        }
    }

    pub(super) fn with(mut self, metadata: Metadata) -> ErrorObj {
        self.metadata = metadata;
        self
    }

    /// Drops what the 2025 bodies did not have yet (docs/providers.md §2.1: the 2025 upstream
    /// captures have only `raw` and `provider_name`).
    pub(super) fn shaped(mut self, shape: Shape) -> ErrorObj {
        if shape == Shape::Y2025 {
            self.metadata.limit_source = None;
            self.metadata.remedy_hint = None;
            self.metadata.is_byok = None;
        }
        self
    }
}

#[derive(Serialize)]
struct ErrorEnvelope<'a> {
    error: &'a ErrorObj,
    #[serde(skip_serializing_if = "Option::is_none")]
    user_id: Option<&'a str>,
}

/// A pre-stream error: status, extra headers and the JSON envelope.
pub(crate) struct ErrorReply {
    status: StatusCode,
    headers: HeaderMap,
    error: ErrorObj,
    user_id: Option<String>,
}

impl ErrorReply {
    pub(super) fn new(status: u16, error: ErrorObj, user_id: Option<String>) -> ErrorReply {
        ErrorReply {
            status: StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            headers: HeaderMap::new(),
            error,
            user_id,
        }
    }

    /// Sets `Retry-After` to whole seconds, rounding a fractional hint up.
    pub(super) fn retry_after(mut self, seconds: u64) -> ErrorReply {
        self.headers
            .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        self
    }

    /// Sets the three `X-RateLimit-*` headers and echoes them in `metadata.headers`.
    pub(super) fn rate_limited(mut self, limit: u32, reset_ms: u64) -> ErrorReply {
        self.headers.extend(rate_limit_headers(limit, 0, reset_ms));
        self.error.metadata.headers = Some(HeaderEcho(vec![
            ("X-RateLimit-Limit", limit.to_string()),
            ("X-RateLimit-Remaining", "0".to_owned()),
            ("X-RateLimit-Reset", reset_ms.to_string()),
        ]));
        self
    }

    pub(crate) fn with_headers(mut self, headers: HeaderMap) -> ErrorReply {
        self.headers.extend(headers);
        self
    }
}

/// OpenRouter's three `X-RateLimit-*` headers, `Reset` in epoch ms (docs/providers.md §2.2).
pub(crate) fn rate_limit_headers(limit: u32, remaining: u32, reset_ms: u64) -> HeaderMap {
    let mut h = HeaderMap::with_capacity(3);
    h.insert(X_RATELIMIT_LIMIT, HeaderValue::from(limit));
    h.insert(X_RATELIMIT_REMAINING, HeaderValue::from(remaining));
    h.insert(X_RATELIMIT_RESET, HeaderValue::from(reset_ms));
    h
}

impl IntoResponse for ErrorReply {
    fn into_response(self) -> Response {
        let body = to_json(&ErrorEnvelope {
            error: &self.error,
            user_id: self.user_id.as_deref(),
        });
        json_response(self.status, self.headers, body)
    }
}

/// 401 on chat without a bearer key (docs/providers.md §2.6).
pub(crate) fn no_auth_credentials() -> ErrorReply {
    ErrorReply::new(401, ErrorObj::new(401, "No auth credentials found"), None)
}

/// 401 on `/key` without a bearer key (docs/providers.md §3.2).
pub(crate) fn missing_auth_header() -> ErrorReply {
    ErrorReply::new(
        401,
        ErrorObj::new(401, "Missing Authentication header"),
        None,
    )
}

/// 400 for a body the simulator cannot serve.
pub(crate) fn invalid_request(message: String, key: &str) -> ErrorReply {
    ErrorReply::new(400, ErrorObj::new(400, message), Some(ids::user_id(key)))
}

/// An `event: error` frame whose data is the bare error envelope, as OpenAI-compatible gateways
/// send it (docs/providers.md §2.8).
pub(crate) fn error_event(error: &ErrorObj) -> Bytes {
    let frame = data_frame(&to_json(&ErrorEnvelope {
        error,
        user_id: None,
    }));
    [&b"event: error\n"[..], &frame].concat().into()
}

/// The body of an `empty_choices` mid-stream error served without streaming: a bare error
/// envelope inside a 200 (docs/providers.md §2.8, OpenRouterTeam/ai-sdk-provider#50 and #82).
pub(crate) fn error_in_200(error: &ErrorObj, key: &str) -> Vec<u8> {
    let user_id = ids::user_id(key);
    to_json(&ErrorEnvelope {
        error,
        user_id: Some(&user_id),
    })
}
