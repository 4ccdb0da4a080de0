//! The exact bodies and headers the simulator sends, after `docs/providers.md`.
//!
//! Clients pattern-match these strings (message texts, `limit_source`, header names), so every
//! literal in this module is copied from the captures character for character and cites the
//! section of `docs/providers.md` it follows. Bodies are serialized from structs so fields keep
//! the order of the captures and the hot path avoids building `serde_json::Value` trees.
//!
//! One file per kind of response, so a change to one provider's shape touches one file:
//! successes (`completion`, `chunk`), the error envelope every refusal shares (`error`), then the
//! refusals by who refused (`rate_limit`, `billing`, `fault` for the rest of the injected
//! faults), Groq (`groq`), Gemini (`gemini`), OpenAI's request limits for the generic provider
//! (`openai`) and the key endpoint (`key`); `strike` is what a refusal builder knows of the
//! request it refuses.

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

mod billing;
mod chunk;
mod completion;
mod error;
mod fault;
mod gemini;
mod groq;
mod key;
mod openai;
mod rate_limit;
mod strike;

pub(crate) use chunk::{ChunkChoice, DONE, KEEPALIVE, MALFORMED_EVENT, padded_stream, sse_chunk};
pub(crate) use completion::{Usage, completion, completion_with_error, padded_completion};
pub(crate) use error::{
    ErrorObj, error_event, error_in_200, invalid_request, missing_auth_header, no_auth_credentials,
    rate_limit_headers,
};
pub(crate) use fault::{HTML_PAGE, bare_error, bare_error_frame, fault_error, midstream_error};
pub(crate) use gemini::{gemini_429, gemini_missing_signature};
pub(crate) use groq::{groq_429, groq_headers};
pub(crate) use key::key_info;
pub(crate) use openai::{openai_429, requests_headers};
pub(crate) use rate_limit::free_tier_429;
pub(crate) use strike::FaultCtx;

pub(crate) const X_GENERATION_ID: HeaderName = HeaderName::from_static("x-generation-id");

/// The identity shared by a completion and all chunks of its stream.
pub(crate) struct Envelope<'a> {
    pub id: &'a str,
    pub created: u64,
    pub model: &'a str,
    pub provider: &'a str,
}

/// One SSE event, `data: <json>\n\n`: the frame every streamed chunk and in-band error shares.
pub(crate) fn data_frame(json: &[u8]) -> Bytes {
    let mut out = Vec::with_capacity(json.len() + 8);
    out.extend_from_slice(b"data: ");
    out.extend_from_slice(json);
    out.extend_from_slice(b"\n\n");
    Bytes::from(out)
}

fn to_json<T: Serialize>(value: &T) -> Vec<u8> {
    // Serializing these plain structs into memory cannot fail (no non-string map keys, no
    // fallible Serialize impls); an empty body would surface as a client-side parse error.
    serde_json::to_vec(value).unwrap_or_default()
}

/// A response with `Content-Type: application/json`.
pub(crate) fn json_response(status: StatusCode, headers: HeaderMap, body: Vec<u8>) -> Response {
    let mut res = (status, Body::from(body)).into_response();
    let h = res.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    h.extend(headers);
    res
}
