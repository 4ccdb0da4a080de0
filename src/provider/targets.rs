//! Where a route's calls go and with whose key.
//!
//! The platform key comes from the environment; a user's own connection is looked up (and
//! decrypted) at call time, so a key never travels in a job. The lookup names the run's user: a
//! connection opens only for the user who owns it, whatever a job says.

use super::{ApiKey, Target};
use crate::route::{Connection, Route};
use async_trait::async_trait;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TargetError {
    #[error("no key for the platform connection (set OPENROUTER_API_KEY)")]
    NoPlatformKey,
    #[error("unknown provider {0:?}")]
    UnknownProvider(String),
    #[error("connection {0:?} is not known")]
    UnknownConnection(String),
    /// The keys cannot be read right now (store outage, no secret key): an infrastructure fault.
    #[error("connection keys unavailable: {0}")]
    Unavailable(String),
}

impl TargetError {
    /// Whether the route simply has no key for this run (as opposed to keys that cannot be read
    /// right now). Such a route is skipped, never called, classified or rested.
    pub fn is_missing_key(&self) -> bool {
        !matches!(self, TargetError::Unavailable(_))
    }
}

#[async_trait]
pub trait Targets: Send + Sync {
    /// The base URL and key for a call on `route` by a run of `user_id`.
    async fn target(&self, route: &Route, user_id: &str) -> Result<Target, TargetError>;
}

/// Targets from the environment: OpenRouter with the platform key. User connections need the
/// store's connection table and are unknown here.
pub struct EnvTargets {
    pub openrouter_base_url: String,
    pub platform_key: Option<ApiKey>,
}

#[async_trait]
impl Targets for EnvTargets {
    async fn target(&self, route: &Route, _user_id: &str) -> Result<Target, TargetError> {
        if route.provider != crate::route::DEFAULT_PROVIDER {
            return Err(TargetError::UnknownProvider(route.provider.clone()));
        }
        match &route.connection {
            Connection::Platform => {
                let api_key = self
                    .platform_key
                    .clone()
                    .ok_or(TargetError::NoPlatformKey)?;
                Ok(Target {
                    base_url: self.openrouter_base_url.clone(),
                    api_key,
                })
            }
            Connection::User(id) => Err(TargetError::UnknownConnection(id.clone())),
        }
    }
}
