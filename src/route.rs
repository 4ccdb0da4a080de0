//! Routes, connections and pools: who is called, with whose key, and which quota it spends.
//!
//! A route is (provider, model, connection). Routes that spend one shared quota belong to a pool;
//! the default pool `openrouter-free` is every `:free` model (and `openrouter/free`) called on
//! OpenRouter with the platform key. Everything else is *off-quota* and stays usable while a pool
//! rests (SPEC §1, §2.2).

use serde::{Deserialize, Serialize};
use std::fmt;

/// The provider name used when a route does not name one.
pub const DEFAULT_PROVIDER: &str = "openrouter";
/// The pool of OpenRouter's shared free quota.
pub const OPENROUTER_FREE_POOL: &str = "openrouter-free";

/// Whose key a call uses.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub enum Connection {
    /// The operator's key from the environment.
    Platform,
    /// A user's own stored connection, by id (`conn_…`); the key itself never travels.
    User(String),
}

impl Connection {
    /// The id used in rest keys and in `worker classify --route MODEL@CONNECTION`.
    pub fn id(&self) -> &str {
        match self {
            Connection::Platform => "platform",
            Connection::User(id) => id,
        }
    }
}

impl From<Connection> for String {
    fn from(c: Connection) -> String {
        c.id().to_string()
    }
}

impl TryFrom<String> for Connection {
    type Error = RouteError;
    fn try_from(s: String) -> Result<Self, RouteError> {
        Connection::parse(&s)
    }
}

impl Connection {
    pub fn parse(s: &str) -> Result<Self, RouteError> {
        if s.is_empty() || s == "platform" {
            return Ok(Connection::Platform);
        }
        let valid = s.len() <= 128
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b':'));
        if valid {
            Ok(Connection::User(s.to_string()))
        } else {
            Err(RouteError::BadConnection(s.to_string()))
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RouteError {
    #[error("connection id {0:?} must be 1-128 characters of [A-Za-z0-9_.:-]")]
    BadConnection(String),
    #[error("model must be 1-200 printable characters without spaces, got {0:?}")]
    BadModel(String),
    #[error("provider must be 1-64 characters of [a-z0-9_-], got {0:?}")]
    BadProvider(String),
}

/// A route as a job names it: `{model, connection?, provider?}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteSpec {
    pub model: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connection: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
}

impl RouteSpec {
    /// `MODEL[@CONNECTION]`, the command-line form.
    pub fn parse_cli(s: &str) -> RouteSpec {
        match s.rsplit_once('@') {
            Some((model, conn)) => RouteSpec {
                model: model.to_string(),
                connection: Some(conn.to_string()),
                provider: None,
            },
            None => RouteSpec {
                model: s.to_string(),
                connection: None,
                provider: None,
            },
        }
    }
}

/// A resolved route: validated, with its pool (if it spends a shared quota).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Route {
    pub provider: String,
    pub model: String,
    pub connection: Connection,
    /// The pool this route spends, `None` for an off-quota route.
    pub pool: Option<String>,
}

impl Route {
    /// Validate a spec and place it in its pool.
    pub fn resolve(spec: &RouteSpec) -> Result<Route, RouteError> {
        let model = spec.model.as_str();
        if model.is_empty() || model.len() > 200 || !model.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(RouteError::BadModel(model.to_string()));
        }
        let provider = spec.provider.as_deref().unwrap_or(DEFAULT_PROVIDER);
        let provider_ok = !provider.is_empty()
            && provider.len() <= 64
            && provider
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'_' | b'-'));
        if !provider_ok {
            return Err(RouteError::BadProvider(provider.to_string()));
        }
        let connection = Connection::parse(spec.connection.as_deref().unwrap_or(""))?;
        let pool = default_pool(provider, model, &connection).map(str::to_string);
        Ok(Route {
            provider: provider.to_string(),
            model: model.to_string(),
            connection,
            pool,
        })
    }

    /// `provider/model` for the platform connection, `conn_id/model` for a user connection.
    pub fn key(&self) -> String {
        match &self.connection {
            Connection::Platform => format!("{}/{}", self.provider, self.model),
            Connection::User(id) => format!("{id}/{}", self.model),
        }
    }

    /// Whether the route spends a shared quota.
    pub fn is_shared(&self) -> bool {
        self.pool.is_some()
    }

    pub fn spec(&self) -> RouteSpec {
        RouteSpec {
            model: self.model.clone(),
            connection: match &self.connection {
                Connection::Platform => None,
                Connection::User(id) => Some(id.clone()),
            },
            provider: (self.provider != DEFAULT_PROVIDER).then(|| self.provider.clone()),
        }
    }
}

impl fmt::Display for Route {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.key())
    }
}

/// The pool rule of SPEC §1: platform key, OpenRouter, a `:free` model or `openrouter/free`.
fn default_pool(provider: &str, model: &str, connection: &Connection) -> Option<&'static str> {
    let free_model = model.ends_with(":free") || model == "openrouter/free";
    (provider == DEFAULT_PROVIDER && *connection == Connection::Platform && free_model)
        .then_some(OPENROUTER_FREE_POOL)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(s: &str) -> Route {
        Route::resolve(&RouteSpec::parse_cli(s)).unwrap()
    }

    #[test]
    fn free_models_on_the_platform_key_share_the_pool() {
        assert_eq!(
            route("meta-llama/llama-3.3-70b-instruct:free")
                .pool
                .as_deref(),
            Some(OPENROUTER_FREE_POOL)
        );
        assert_eq!(
            route("openrouter/free").pool.as_deref(),
            Some(OPENROUTER_FREE_POOL)
        );
        assert_eq!(route("openai/gpt-4o-mini").pool, None);
        assert_eq!(route("qwen/qwen3-coder:free@conn_1").pool, None);
    }

    #[test]
    fn keys_name_the_connection_for_user_routes() {
        assert_eq!(route("a/b:free").key(), "openrouter/a/b:free");
        assert_eq!(route("a/b:free@conn_9").key(), "conn_9/a/b:free");
    }

    #[test]
    fn bad_parts_are_rejected() {
        assert!(Route::resolve(&RouteSpec::parse_cli("")).is_err());
        assert!(Route::resolve(&RouteSpec::parse_cli("a b")).is_err());
        assert!(Route::resolve(&RouteSpec::parse_cli("m@bad conn")).is_err());
    }
}
