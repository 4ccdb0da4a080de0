//! Connecting to Redis with timeouts that survive load.
//!
//! redis-rs defaults to a 500 ms response timeout, which kills busy workers (see
//! docs/operations.md); every freeway process connects through here instead.

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
#[error("cannot reach Redis at {url}: {source}")]
pub struct ConnectError {
    /// The URL without its password.
    pub url: String,
    pub source: redis::RedisError,
}

/// Redis timeouts of docs/design.md §4.3: at least 5 s.
pub const REDIS_RESPONSE_TIMEOUT: Duration = Duration::from_secs(10);
pub const REDIS_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

pub async fn redis(url: &str) -> Result<ConnectionManager, ConnectError> {
    let err = |source| ConnectError {
        url: redact(url),
        source,
    };
    let client = redis::Client::open(url).map_err(err)?;
    let config = ConnectionManagerConfig::new()
        .set_response_timeout(Some(REDIS_RESPONSE_TIMEOUT))
        .set_connection_timeout(Some(REDIS_CONNECT_TIMEOUT))
        .set_number_of_retries(1);
    client
        .get_connection_manager_with_config(config)
        .await
        .map_err(err)
}

/// A URL with any password replaced, fit for an error line.
pub fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s + 3 => format!("{}***{}", &url[..s + 3], &url[at..]),
        _ => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn passwords_are_redacted() {
        assert_eq!(
            super::redact("redis://:pw@host:1/0"),
            "redis://***@host:1/0"
        );
        assert_eq!(
            super::redact("redis://127.0.0.1:6379"),
            "redis://127.0.0.1:6379"
        );
    }
}
