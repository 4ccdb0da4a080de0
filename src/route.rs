//! Routes, connections and pools: who is called, with whose key, and which quota it spends.
//!
//! A route is (provider, model, connection). Routes that spend one shared quota belong to a pool
//! instance, which the [`Catalog`] places them in (without a configuration file, the pool
//! `openrouter-free`: every `:free` model and `openrouter/free` called on OpenRouter with the
//! platform key). Everything else is *off-quota* and stays usable while a pool rests.
//!
//! A route's identity is what rests, circuits and evidence are keyed by, so two routes that spend
//! different keys must never share one: the platform's routes are keyed `platform:{provider}/…`
//! and a user's `conn:{id}/…`, and no connection id can pass for the platform or a provider.

use crate::catalog::{Catalog, OPENROUTER};
use crate::connection::BadConnection;
use crate::dialect::{DayClock, Dialect};
use crate::pace::Limits;
use serde::{Deserialize, Serialize};
use std::fmt;

/// The model of a metrics label for every model the configuration does not name.
pub const OTHER_MODEL: &str = "other";

pub use crate::catalog::OPENROUTER_FREE_POOL;
pub use crate::connection::Connection;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RouteError {
    #[error(transparent)]
    BadConnection(#[from] BadConnection),
    #[error("model must be 1-200 printable characters without spaces, got {0:?}")]
    BadModel(String),
    #[error("provider must be 1-64 characters of [a-z0-9_-], got {0:?}")]
    BadProvider(String),
    /// A route to a provider freeway cannot call would only ever fail, and its failures must
    /// not rest anything: it is refused at enqueue.
    #[error("unknown provider {name:?} (configured: {known})")]
    UnknownProvider { name: String, known: String },
}

/// A route as a job names it: `{model, connection?, provider?}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct RouteSpec {
    pub model: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connection: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
}

impl RouteSpec {
    /// `[PROVIDER:]MODEL[@CONNECTION]`, the command-line form. `PROVIDER:` is a provider only
    /// when `catalog` configures one of that name, so `deepseek/deepseek-r1:free` stays a model.
    pub fn parse_cli(s: &str, catalog: &Catalog) -> RouteSpec {
        let (rest, connection) = match s.rsplit_once('@') {
            Some((rest, conn)) => (rest, Some(conn.to_string())),
            None => (s, None),
        };
        let (provider, model) = match rest.split_once(':') {
            Some((p, model)) if catalog.provider(p).is_some() => (Some(p.to_string()), model),
            _ => (None, rest),
        };
        RouteSpec {
            model: model.to_string(),
            connection,
            provider,
        }
    }
}

/// A resolved route: validated, with its provider's dialect and the pool instance it spends.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Route {
    pub provider: String,
    pub model: String,
    pub connection: Connection,
    /// The pool instance this route spends, `None` for an off-quota route.
    pub pool: Option<String>,
    /// How the route's provider speaks about limits.
    pub dialect: Dialect,
    /// When the route's spent day comes back (its pool's `day_reset`, or the dialect's day).
    pub day: DayClock,
    /// The limits its pool starts pacing by (what the pool declares, perhaps nothing), for a
    /// route in a pool.
    pub pace: Option<Limits>,
}

impl Route {
    /// A route from its command-line form, `[PROVIDER:]MODEL[@CONNECTION]`.
    pub fn parse(s: &str, catalog: &Catalog) -> Result<Route, RouteError> {
        Route::resolve(&RouteSpec::parse_cli(s, catalog), catalog)
    }

    /// Validate a spec, and place it with the provider and pool `catalog` configures.
    pub fn resolve(spec: &RouteSpec, catalog: &Catalog) -> Result<Route, RouteError> {
        let model = spec.model.as_str();
        if model.is_empty() || model.len() > 200 || !model.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(RouteError::BadModel(model.to_string()));
        }
        let provider = spec.provider.as_deref().unwrap_or(OPENROUTER);
        let provider_ok = !provider.is_empty()
            && provider.len() <= 64
            && provider
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'_' | b'-'));
        if !provider_ok {
            return Err(RouteError::BadProvider(provider.to_string()));
        }
        let connection = Connection::parse(spec.connection.as_deref().unwrap_or(""))?;
        let placed = catalog.place(provider, model, &connection).ok_or_else(|| {
            RouteError::UnknownProvider {
                name: provider.to_string(),
                known: catalog.provider_names(),
            }
        })?;
        Ok(Route {
            provider: provider.to_string(),
            model: model.to_string(),
            connection,
            pool: placed.pool,
            dialect: placed.dialect,
            day: placed.day,
            pace: placed.pace,
        })
    }

    /// `platform:{provider}/{model}` or `conn:{id}/{model}`: the route's rest key. The two
    /// prefixes keep a user's key from ever resting the platform's routes, or the reverse.
    pub fn key(&self) -> String {
        format!("{}/{}", self.connection_scope(), self.model)
    }

    /// Whose key the route spends, as circuits are keyed: `platform:{provider}` (the operator's
    /// key of that provider) or `conn:{id}` (one user's connection).
    pub fn connection_scope(&self) -> String {
        match &self.connection {
            Connection::Platform => format!("platform:{}", self.provider),
            Connection::User(id) => format!("conn:{id}"),
        }
    }

    /// The route as a metrics label. Neither a user's connection id (it names a user) nor a
    /// model only a request names (`catalog` does not: [`Catalog::names_model`]) is in it, as
    /// every new one would be a new series kept for good: a user's routes count as
    /// `conn:*/{model}`, and an unnamed model as [`OTHER_MODEL`].
    pub fn metrics_label(&self, catalog: &Catalog) -> String {
        let model = match catalog.names_model(&self.provider, &self.model) {
            true => self.model.as_str(),
            false => OTHER_MODEL,
        };
        match &self.connection {
            Connection::Platform => format!("{}/{model}", self.connection_scope()),
            Connection::User(_) => format!("conn:*/{model}"),
        }
    }

    /// Whether the configuration names this route: the operator's key of a provider, on a model a
    /// pool or a price names. Any other route (a model only requests name, a user's own
    /// connection) is one a user can make without end, and what it leaves behind is bounded
    /// (its rests: [`crate::rest::Rests::write_unnamed`]).
    pub fn is_configured(&self, catalog: &Catalog) -> bool {
        self.connection == Connection::Platform && catalog.names_model(&self.provider, &self.model)
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
            provider: (self.provider != OPENROUTER).then(|| self.provider.clone()),
        }
    }
}

impl fmt::Display for Route {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.key())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(s: &str) -> Route {
        Route::parse(s, &Catalog::builtin()).unwrap()
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
    fn platform_and_user_keys_never_collide() {
        assert_eq!(route("a/b:free").key(), "platform:openrouter/a/b:free");
        assert_eq!(route("a/b:free@conn_9").key(), "conn:conn_9/a/b:free");
        // A connection named after the provider is still a user's connection.
        let named_like_the_provider = route("a/b:free@openrouter");
        assert_ne!(named_like_the_provider.key(), route("a/b:free").key());
        assert_ne!(
            named_like_the_provider.connection_scope(),
            route("a/b:free").connection_scope()
        );
    }

    #[test]
    fn a_metrics_label_names_only_what_the_configuration_names() {
        let catalog =
            Catalog::from_toml("[prices]\n\"openrouter:a/b\" = { input = 1, output = 1 }\n")
                .unwrap();
        assert_eq!(
            route("a/b").metrics_label(&catalog),
            "platform:openrouter/a/b"
        );
        assert_eq!(route("a/b@conn_9").metrics_label(&catalog), "conn:*/a/b");
        for unnamed in ["x/y", "made-up-1:free", "a/b:free"] {
            assert_eq!(
                route(unnamed).metrics_label(&catalog),
                "platform:openrouter/other",
                "{unnamed}"
            );
            let user = format!("{unnamed}@conn_9");
            assert_eq!(route(&user).metrics_label(&catalog), "conn:*/other");
        }
        let builtin = Catalog::builtin();
        assert_eq!(
            route("openrouter/free").metrics_label(&builtin),
            "platform:openrouter/openrouter/free"
        );
    }

    #[test]
    fn only_known_providers_are_routes() {
        let spec = RouteSpec {
            model: "m".into(),
            connection: None,
            provider: Some("nosuch".into()),
        };
        assert_eq!(
            Route::resolve(&spec, &Catalog::builtin()),
            Err(RouteError::UnknownProvider {
                name: "nosuch".into(),
                known: "openrouter".into()
            })
        );
    }

    #[test]
    fn a_provider_prefix_is_read_only_when_it_names_a_configured_provider() {
        let catalog = Catalog::builtin();
        let spec = RouteSpec::parse_cli("openrouter:x/y:free@conn_1", &catalog);
        assert_eq!(
            (
                spec.provider.as_deref(),
                spec.model.as_str(),
                spec.connection.as_deref()
            ),
            (Some("openrouter"), "x/y:free", Some("conn_1"))
        );
        let spec = RouteSpec::parse_cli("deepseek/deepseek-r1:free", &catalog);
        assert_eq!(
            (spec.provider, spec.model.as_str()),
            (None, "deepseek/deepseek-r1:free")
        );
    }

    #[test]
    fn bad_parts_are_rejected() {
        let catalog = Catalog::builtin();
        for bad in ["", "a b", "m@bad conn"] {
            assert!(Route::parse(bad, &catalog).is_err());
        }
    }
}
