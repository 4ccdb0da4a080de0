//! Without `FREEWAY_API_TOKEN` the API trusts whoever can reach it, and binds a loopback address
//! so that only this machine can. A browser on this machine can still be turned against it:
//!
//! - **DNS rebinding.** A page of `evil.example` re-points that name at 127.0.0.1 and then reads
//!   the API as its own origin. Its requests still say `Host: evil.example`, so a request whose
//!   host is not a loopback name or address is refused with **421** (Misdirected Request).
//! - **Cross-site requests.** A page of another site posts to `http://127.0.0.1:8080`; the
//!   browser says where the page came from in `Origin`, so a request whose `Origin` is not a
//!   loopback one is refused with **403**.
//!
//! Both errors have the code `forbidden`. Loopback means `localhost`, any `127.x.y.z` and
//! `[::1]`, each with or without a port. With an API token configured neither check applies:
//! the token is the protection, and a public deployment sits behind names of its own.

use super::error::ApiError;
use super::state::AppState;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, Uri, header};
use axum::middleware::Next;
use axum::response::Response;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

/// Middleware for every route (the board, `/metrics` and `/healthz` included).
pub async fn loopback_only(
    State(state): State<Arc<AppState>>,
    request: Request,
    next: Next,
) -> Result<Response, ApiError> {
    if state.tokens.api.is_none() {
        check(request.uri(), request.headers())?;
    }
    Ok(next.run(request).await)
}

fn check(uri: &Uri, headers: &HeaderMap) -> Result<(), ApiError> {
    // A request in absolute form names its host in the URI, which then wins over `Host`: both,
    // when present, must be loopback.
    let host = headers
        .get(header::HOST)
        .map(|h| h.to_str().is_ok_and(is_loopback));
    let target = uri.authority().map(|a| is_loopback(a.as_str()));
    let addressed_here = match (host, target) {
        (None, None) => false,
        (host, target) => host != Some(false) && target != Some(false),
    };
    if !addressed_here {
        return Err(ApiError::ForeignHost(
            "without FREEWAY_API_TOKEN the API answers only requests addressed to localhost, \
             127.0.0.1 or [::1]"
                .into(),
        ));
    }
    if let Some(origin) = headers.get(header::ORIGIN) {
        let local = origin
            .to_str()
            .ok()
            .and_then(|o| o.parse::<Uri>().ok())
            .filter(|o| o.scheme().is_some())
            .and_then(|o| o.authority().map(|a| is_loopback(a.as_str())))
            .unwrap_or(false);
        if !local {
            return Err(ApiError::CrossSiteOrigin(
                "without FREEWAY_API_TOKEN the API refuses requests from pages of other sites"
                    .into(),
            ));
        }
    }
    Ok(())
}

/// `host[:port]` where host is `localhost`, an IPv4 loopback address or `[::1]`.
fn is_loopback(authority: &str) -> bool {
    if let Some(bracketed) = authority.strip_prefix('[') {
        return bracketed.split_once(']').is_some_and(|(ip, port)| {
            optional_port(port) && ip.parse::<Ipv6Addr>().is_ok_and(|ip| ip.is_loopback())
        });
    }
    let host = authority.split(':').next().unwrap_or_default();
    optional_port(&authority[host.len()..])
        && (host.eq_ignore_ascii_case("localhost")
            || host.parse::<Ipv4Addr>().is_ok_and(|ip| ip.is_loopback()))
}

/// Nothing, or `:` and a port number.
fn optional_port(rest: &str) -> bool {
    rest.is_empty()
        || rest
            .strip_prefix(':')
            .is_some_and(|p| p.parse::<u16>().is_ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_names_and_addresses_with_or_without_a_port() {
        for local in [
            "localhost",
            "LOCALHOST:8080",
            "127.0.0.1",
            "127.255.0.9:1",
            "[::1]",
            "[::1]:8080",
            "[0:0:0:0:0:0:0:1]",
        ] {
            assert!(is_loopback(local), "{local}");
        }
        for foreign in [
            "",
            "evil.example",
            "localhost.evil.example",
            "127.0.0.1.evil.example",
            "evil.localhost",
            "128.0.0.1",
            "0.0.0.0",
            "[::2]",
            "[::1",
            "[::1]x",
            "::1",
            "localhost:",
            "localhost:99999",
            "localhost:80:80",
            "user@127.0.0.1",
            "0x7f.0.0.1",
        ] {
            assert!(!is_loopback(foreign), "{foreign}");
        }
    }
}
