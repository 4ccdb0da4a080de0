//! Whose key a call spends: the operator's (`platform`) or one user's stored connection. A
//! route, the catalog's pools and the stored connections all name it, so it lives below them.

use serde::{Deserialize, Serialize};

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
    type Error = BadConnection;
    fn try_from(s: String) -> Result<Self, BadConnection> {
        Connection::parse(&s)
    }
}

impl Connection {
    /// A connection id as a request names it: empty or `platform` for the operator's key.
    pub fn parse(s: &str) -> Result<Self, BadConnection> {
        if s.is_empty() || s == "platform" {
            return Ok(Connection::Platform);
        }
        let valid = s.len() <= 128
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b':'));
        if valid {
            Ok(Connection::User(s.to_string()))
        } else {
            Err(BadConnection(s.to_string()))
        }
    }
}

/// A connection id that is not one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("connection id {0:?} must be 1-128 characters of [A-Za-z0-9_.:-]")]
pub struct BadConnection(pub String);
