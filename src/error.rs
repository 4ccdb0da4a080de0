//! The errors several modules share, below all of them: a shared part of the fleet names its
//! error, and the catalog its configuration error, without importing the module that gathers
//! them (`fleet`, `config`), which re-exports each as its own.

/// The shared state could not be read or written (Redis is down or answered nonsense); the
/// message and the cause chain say what, without naming the client library's types. The one
/// Redis error of the core and of the queue.
#[derive(Debug, thiserror::Error)]
#[error("redis: {0}")]
pub struct FleetError(Box<dyn std::error::Error + Send + Sync>);

impl From<redis::RedisError> for FleetError {
    fn from(e: redis::RedisError) -> Self {
        FleetError(Box::new(e))
    }
}

impl FleetError {
    /// Another Redis client's failure on the same Redis (apalis-redis's, in the queue), kept as
    /// opaque as the redis-rs ones: the crate that meets it cannot write a `From` for a type and
    /// an error that are both foreign to it.
    pub fn other(e: impl std::error::Error + Send + Sync + 'static) -> FleetError {
        FleetError(Box::new(e))
    }
}

/// A setting that cannot be used: the variable, and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{var}: {message}")]
pub struct ConfigError {
    pub var: &'static str,
    pub message: String,
}

impl ConfigError {
    pub(crate) fn new(var: &'static str, message: impl Into<String>) -> Self {
        Self {
            var,
            message: message.into(),
        }
    }
}
