//! Canaries (docs/design.md §4.6): one tiny call per provider and period, once per fleet, so a
//! provider whose key, model or answers changed is noticed before users' runs find out.
//!
//! This module decides *what* each provider's canary calls and how often, from the catalog; the
//! engine makes the call like any other (through the limiter, classified, its rests written) and
//! the store keeps it in the attempt log under kind `canary`.

use crate::catalog::Catalog;
use crate::route::{Route, RouteSpec};
use crate::run::AttemptRecord;
use serde::Serialize;
use std::time::Duration;

/// A provider's canary: the route it calls and how often, fleet-wide.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Canary {
    pub provider: String,
    /// The provider's first configured model: the first of its pools' models that is not a
    /// pattern, on the platform's key.
    pub route: Route,
    pub every: Duration,
}

/// One canary as the attempt log keeps it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CanaryRecord {
    pub provider: String,
    pub attempt: AttemptRecord,
}

impl CanaryRecord {
    /// The attempt log's run id for a canary: no run's (those are ULIDs), one per canary.
    pub fn run_id(provider: &str, t_ms: u64) -> String {
        format!("canary:{provider}:{t_ms}")
    }

    /// The provider a canary's run id names.
    pub fn provider_of(run_id: &str) -> Option<&str> {
        let (provider, _) = run_id.strip_prefix("canary:")?.rsplit_once(':')?;
        Some(provider)
    }

    /// Whether the provider refused or failed the call.
    pub fn failed(&self) -> bool {
        self.attempt.verdict.is_some()
    }
}

/// Each provider's canary, in the catalog's order. A provider has one when one of its pools has
/// a `canary_every` (the shortest wins) and names a model without a pattern; the others are
/// returned by name in the second list, so a worker can say why they have none.
pub fn plan(catalog: &Catalog) -> (Vec<Canary>, Vec<String>) {
    let (mut canaries, mut without) = (Vec::new(), Vec::new());
    for provider in catalog.providers() {
        let pools: Vec<_> = catalog
            .pools()
            .filter(|p| p.provider == provider.name)
            .collect();
        let Some(every_s) = pools.iter().filter_map(|p| p.canary_every_s).min() else {
            continue;
        };
        let model = pools
            .iter()
            .flat_map(|p| p.models.iter())
            .map(|g| g.as_str())
            .find(|m| !m.contains(['*', '?']));
        let spec = model.map(|model| RouteSpec {
            model: model.to_string(),
            connection: None,
            provider: Some(provider.name.clone()),
        });
        match spec.and_then(|spec| Route::resolve(&spec, catalog).ok()) {
            Some(route) => canaries.push(Canary {
                provider: provider.name.clone(),
                route,
                every: Duration::from_secs(every_s.max(1)),
            }),
            None => without.push(provider.name.clone()),
        }
    }
    (canaries, without)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_builtin_canary_calls_openrouters_free_router_weekly() {
        let (canaries, without) = plan(&Catalog::builtin());
        assert_eq!(without, Vec::<String>::new());
        assert_eq!(canaries.len(), 1);
        let c = &canaries[0];
        assert_eq!(
            (c.provider.as_str(), c.route.model.as_str()),
            ("openrouter", "openrouter/free")
        );
        assert_eq!(
            c.route.pool.as_deref(),
            Some("openrouter-free"),
            "through the pool's limiter"
        );
        assert_eq!(c.every, Duration::from_secs(7 * 24 * 3600));
    }

    #[test]
    fn a_run_id_names_its_provider_back() {
        let id = CanaryRecord::run_id("groq", 1_700_000_000_000);
        assert_eq!(CanaryRecord::provider_of(&id), Some("groq"));
        assert_eq!(CanaryRecord::provider_of("01JABCDEF"), None);
    }
}
