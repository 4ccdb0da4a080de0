//! Bodies on `/v1` must be JSON: a request that carries a body of another type, or a body with
//! no type at all, is refused with 415 before any handler reads it.
//!
//! This is what keeps a cross-site page from driving the API. A browser sends a form post or a
//! `fetch` with `text/plain`, `application/x-www-form-urlencoded` or `multipart/form-data` to any
//! site without asking it first; for `application/json` it asks first (a CORS preflight) and
//! sends nothing unless this server allows the page's origin. The handlers parse bodies as JSON
//! whatever their header says, so without this check such a post would enqueue a run.

use super::error::ApiError;
use axum::extract::Request;
use axum::http::{HeaderMap, Method, header};
use axum::middleware::Next;
use axum::response::Response;

/// Middleware for `/v1`.
pub async fn require_json(request: Request, next: Next) -> Result<Response, ApiError> {
    check(request.method(), request.headers())?;
    Ok(next.run(request).await)
}

fn check(method: &Method, headers: &HeaderMap) -> Result<(), ApiError> {
    let sends_body =
        has_body(headers) || [Method::POST, Method::PUT, Method::PATCH].contains(method);
    match headers.get(header::CONTENT_TYPE) {
        Some(value) if !is_json(value.to_str().unwrap_or_default()) && sends_body => Err(
            ApiError::UnsupportedMediaType("the body must be application/json".into()),
        ),
        None if has_body(headers) => Err(ApiError::UnsupportedMediaType(
            "a body needs Content-Type: application/json".into(),
        )),
        _ => Ok(()),
    }
}

/// Whether the request has a non-empty body. The server speaks HTTP/1.1 only, where a body is
/// announced by `Content-Length` or `Transfer-Encoding`.
fn has_body(headers: &HeaderMap) -> bool {
    match headers.get(header::CONTENT_LENGTH) {
        Some(length) => length
            .to_str()
            .ok()
            .and_then(|l| l.trim().parse::<u64>().ok())
            .is_none_or(|n| n > 0),
        None => headers.contains_key(header::TRANSFER_ENCODING),
    }
}

/// `application/json`, in any case, with or without parameters (`; charset=utf-8`).
fn is_json(content_type: &str) -> bool {
    let essence = content_type.split(';').next().unwrap_or_default();
    essence.trim().eq_ignore_ascii_case("application/json")
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(header::HeaderName, &'static str)]) -> HeaderMap {
        pairs
            .iter()
            .map(|(k, v)| (k.clone(), HeaderValue::from_static(v)))
            .collect()
    }

    #[test]
    fn only_json_bodies_pass() {
        use header::{CONTENT_LENGTH as LEN, CONTENT_TYPE as TYPE, TRANSFER_ENCODING as TE};
        let json = [(TYPE, "application/json; charset=utf-8"), (LEN, "2")];
        assert!(check(&Method::POST, &headers(&json)).is_ok());
        assert!(check(&Method::POST, &headers(&[(TYPE, "APPLICATION/JSON")])).is_ok());
        assert!(check(&Method::GET, &headers(&[])).is_ok());
        assert!(check(&Method::DELETE, &headers(&[(LEN, "0")])).is_ok());
        assert!(check(&Method::GET, &headers(&[(TYPE, "text/plain")])).is_ok());
        for refused in [
            vec![(TYPE, "text/plain"), (LEN, "2")],
            vec![(TYPE, "text/plain")],
            vec![(TYPE, "application/json-seq"), (LEN, "2")],
            vec![(LEN, "2")],
            vec![(TE, "chunked")],
        ] {
            assert!(
                check(&Method::POST, &headers(&refused)).is_err(),
                "{refused:?}"
            );
        }
        assert!(check(&Method::DELETE, &headers(&[(TE, "chunked")])).is_err());
    }
}
