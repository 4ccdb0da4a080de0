//! Where a route's calls go and with whose key.
//!
//! The provider's base URL comes from the [`Catalog`], the platform key from the environment; a user's own connection is looked up (and
//! decrypted) at call time, so a key never travels in a job. The lookup names the run's user: a
//! connection opens only for the user who owns it, whatever a job says.

use super::{ApiKey, Target};
use crate::catalog::{Catalog, OPENROUTER};
use crate::route::{Connection, Route};
use async_trait::async_trait;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TargetError {
    #[error("no platform key for {provider} (set {var})")]
    NoPlatformKey { provider: String, var: String },
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

/// Targets from the configuration and the environment: each provider's base URL, with the
/// platform key its `api_key_env` names. User connections need the store's connection table
/// and are unknown here.
pub struct EnvTargets {
    catalog: Arc<Catalog>,
    /// Provider name → platform key.
    keys: BTreeMap<String, ApiKey>,
}

impl EnvTargets {
    pub fn new(catalog: Arc<Catalog>, keys: BTreeMap<String, ApiKey>) -> EnvTargets {
        EnvTargets { catalog, keys }
    }

    /// The built-in catalog with OpenRouter at `base_url` and `key` as its platform key.
    pub fn openrouter(base_url: &str, key: Option<ApiKey>) -> EnvTargets {
        let vars = HashMap::from([("OPENROUTER_BASE_URL".to_string(), base_url.to_string())]);
        let catalog = crate::catalog::load(&vars).unwrap_or_default();
        let keys = key
            .map(|k| (OPENROUTER.to_string(), k))
            .into_iter()
            .collect();
        EnvTargets::new(Arc::new(catalog), keys)
    }

    /// The base URL of `provider`, if it is configured.
    /// The operator's key of `provider`, for calls that belong to no user (its quota endpoint).
    pub fn platform(&self, provider: &str) -> Result<Target, TargetError> {
        let provider = self
            .catalog
            .provider(provider)
            .ok_or_else(|| TargetError::UnknownProvider(provider.to_string()))?;
        let api_key =
            self.keys
                .get(&provider.name)
                .cloned()
                .ok_or_else(|| TargetError::NoPlatformKey {
                    provider: provider.name.clone(),
                    var: provider.api_key_env.clone().unwrap_or_default(),
                })?;
        Ok(Target {
            base_url: provider.base_url.clone(),
            api_key,
        })
    }

    pub fn base_url(&self, provider: &str) -> Option<String> {
        self.catalog.provider(provider).map(|p| p.base_url.clone())
    }
}

#[async_trait]
impl Targets for EnvTargets {
    async fn target(&self, route: &Route, _user_id: &str) -> Result<Target, TargetError> {
        match &route.connection {
            Connection::Platform => self.platform(&route.provider),
            Connection::User(id) => Err(TargetError::UnknownConnection(id.clone())),
        }
    }
}
