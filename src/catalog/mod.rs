//! The providers and pools freeway knows (docs/configuration.md): where each provider is, how it
//! speaks about limits, and which routes spend one shared quota.
//!
//! Free tiers are quotas with shapes: OpenRouter's free models share one per-account minute and
//! day; Groq limits each model on each key; Gemini's day ends at midnight Pacific. A [`Catalog`]
//! holds those shapes, from the built-in defaults merged with `FREEWAY_CONFIG` ([`file`]), and
//! answers the two questions everything else asks: which provider does a route call, and which pool
//! instance (if any) does it spend. (v3) It also holds the tiers tenants are weighed and capped by
//! (docs/design.md §4.7, §4.8) and the prices of routes whose provider does not report a cost.

mod file;
mod glob;
mod prices;

pub(crate) use file::http_url;
pub use file::load;
pub use glob::Glob;
pub use prices::{Price, PriceRule};

use crate::connection::Connection;
use crate::dialect::{DayClock, Dialect};
use crate::pace::Limits;
use chrono_tz::Tz;
use serde::{Serialize, Serializer};
use std::collections::BTreeMap;

/// The built-in provider, and the one a route names when it names none.
pub const OPENROUTER: &str = "openrouter";
/// The built-in pool of OpenRouter's shared free quota.
pub const OPENROUTER_FREE_POOL: &str = "openrouter-free";
/// OpenRouter's API, unless `OPENROUTER_BASE_URL` or the file says otherwise.
pub const OPENROUTER_BASE_URL: &str = "https://openrouter.ai/api/v1";
/// How often a provider's canary runs unless its pools say otherwise: once a week.
pub const DEFAULT_CANARY_EVERY_S: u64 = 7 * 24 * 3600;
/// The built-in tier, and the one a run names when it names none.
pub const DEFAULT_TIER: &str = "default";

/// An OpenAI-compatible API.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Provider {
    pub name: String,
    pub base_url: String,
    /// The variable holding the platform key; `None`: only users' own connections call it.
    pub api_key_env: Option<String>,
    pub dialect: Dialect,
}

/// Which keys one pool's quota belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum PoolKeys {
    /// The operator's key only: one account-wide pool.
    Platform,
    /// Every key, each its own instance (`{pool}@{connection}`): a user's own key has its own
    /// limits.
    Each,
}

/// How a pool's window is counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Window {
    /// Aligned to the epoch, as OpenRouter's minute.
    Fixed,
    /// Continuously refilling, as Groq's.
    Rolling,
}

/// A quota several routes spend.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Pool {
    pub name: String,
    pub provider: String,
    #[cfg_attr(feature = "openapi", schema(value_type = Vec<String>))]
    pub models: Vec<Glob>,
    #[serde(rename = "connection")]
    pub keys: PoolKeys,
    pub rpm: Option<u32>,
    pub rpd: Option<u32>,
    pub tpm: Option<u32>,
    pub tpd: Option<u32>,
    pub window: Window,
    pub window_s: u32,
    /// The zone whose midnight ends the pool's day; `None`: the provider's dialect decides.
    #[serde(serialize_with = "zone_name")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>))]
    pub day_reset: Option<Tz>,
    /// Seconds between canaries of this pool's provider; `None`: off.
    pub canary_every_s: Option<u64>,
    /// The configured limits stand even where the provider states others.
    pub pin: bool,
}

impl Pool {
    /// The instance the platform's key spends: the pool itself, or `{pool}@platform` for a
    /// per-key pool.
    pub fn platform_instance(&self) -> String {
        match self.keys {
            PoolKeys::Platform => self.name.clone(),
            PoolKeys::Each => format!("{}@{}", self.name, Connection::Platform.id()),
        }
    }

    /// The limits the limiter starts this pool with (docs/design.md §4.4): what it declares,
    /// which may be nothing; what the provider states is learned on top.
    pub fn limits(&self) -> Limits {
        Limits {
            per_window: self.rpm,
            per_day: self.rpd,
            tokens_per_window: self.tpm,
            tokens_per_day: self.tpd,
            pin: self.pin,
            ..Limits::unstated(
                u64::from(self.window_s.max(1)) * 1000,
                self.window == Window::Rolling,
            )
        }
    }
}

fn zone_name<S: Serializer>(zone: &Option<Tz>, s: S) -> Result<S::Ok, S::Error> {
    match zone {
        Some(z) => s.serialize_str(z.name()),
        None => s.serialize_none(),
    }
}

/// What a tenant's runs are weighed and capped by (`[tiers.NAME]`, docs/design.md §4.7, §4.8).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Tier {
    /// The tenant's share of a shared pool's slots while several tenants wait, relative to the
    /// others' (at least 1).
    pub weight: u32,
    /// What one tenant of the tier may spend a day on priced routes, in USD; `None`: no cap.
    pub spend_usd_per_day: Option<f64>,
    /// The zone whose midnight starts a new spending day.
    #[serde(serialize_with = "tier_zone")]
    pub day_reset: Tz,
}

impl Default for Tier {
    /// The built-in `default` tier: weight 1, no cap, UTC days.
    fn default() -> Tier {
        Tier {
            weight: 1,
            spend_usd_per_day: None,
            day_reset: chrono_tz::UTC,
        }
    }
}

fn tier_zone<S: Serializer>(zone: &Tz, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(zone.name())
}

/// The providers, pools, tiers and prices in force.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Catalog {
    providers: BTreeMap<String, Provider>,
    pools: BTreeMap<String, Pool>,
    tiers: BTreeMap<String, Tier>,
    /// Most specific first, as [`Catalog::price`] tries them.
    prices: Vec<PriceRule>,
}

/// What a route spends, as resolution finds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    pub dialect: Dialect,
    /// The pool instance: the pool's name, or `{pool}@{connection}` for a per-key pool.
    pub pool: Option<String>,
    /// When the route's spent day comes back.
    pub day: DayClock,
    /// The pool's limits, for a route in a pool: the limiter paces its calls by them and by
    /// what the provider states.
    pub pace: Option<Limits>,
}

impl Default for Catalog {
    fn default() -> Self {
        Catalog::builtin()
    }
}

impl Catalog {
    /// freeway without a configuration file: OpenRouter and its free pool.
    pub fn builtin() -> Catalog {
        let openrouter = Provider {
            name: OPENROUTER.into(),
            base_url: OPENROUTER_BASE_URL.into(),
            api_key_env: Some("OPENROUTER_API_KEY".into()),
            dialect: Dialect::Openrouter,
        };
        let free = Pool {
            name: OPENROUTER_FREE_POOL.into(),
            provider: OPENROUTER.into(),
            models: ["*:free", "openrouter/free"]
                .iter()
                .filter_map(|p| Glob::parse(p).ok())
                .collect(),
            keys: PoolKeys::Platform,
            rpm: Some(20),
            rpd: None,
            tpm: None,
            tpd: None,
            window: Window::Fixed,
            window_s: 60,
            day_reset: Some(chrono_tz::UTC),
            canary_every_s: Some(DEFAULT_CANARY_EVERY_S),
            pin: false,
        };
        Catalog {
            providers: BTreeMap::from([(openrouter.name.clone(), openrouter)]),
            pools: BTreeMap::from([(free.name.clone(), free)]),
            tiers: BTreeMap::from([(DEFAULT_TIER.to_string(), Tier::default())]),
            prices: Vec::new(),
        }
    }

    pub fn provider(&self, name: &str) -> Option<&Provider> {
        self.providers.get(name)
    }

    pub fn providers(&self) -> impl Iterator<Item = &Provider> {
        self.providers.values()
    }

    pub fn pools(&self) -> impl Iterator<Item = &Pool> {
        self.pools.values()
    }

    /// The tier called `name`; `None` when none is configured.
    pub fn tier(&self, name: &str) -> Option<&Tier> {
        self.tiers.get(name)
    }

    /// Every tier with its name, by name.
    pub fn tiers(&self) -> impl Iterator<Item = (&str, &Tier)> {
        self.tiers.iter().map(|(name, tier)| (name.as_str(), tier))
    }

    /// The configured tier names, for error messages: `default, pro`.
    pub fn tier_names(&self) -> String {
        self.tiers.keys().cloned().collect::<Vec<_>>().join(", ")
    }

    /// The configured price of `model` on `provider`, by the most specific `[prices]` key that
    /// matches (the rule is in `catalog/prices.rs`); `None` when no key does. It does not know
    /// pools: a route of a free pool costs nothing, whatever a bare glob here would say, and
    /// callers skip those.
    pub fn price(&self, provider: &str, model: &str) -> Option<Price> {
        prices::lookup(&self.prices, provider, model)
    }

    /// Whether `model` of `provider` is named in the configuration itself, as a pool's model
    /// or a price that is not a pattern: the models whose calls `/metrics` and the routes chart
    /// count under their own name. A model a request names and no configuration does is counted
    /// as `other`, so requests cannot grow the series without bound.
    pub fn names_model(&self, provider: &str, model: &str) -> bool {
        let literal = |g: &Glob| g.as_str() == model && !g.as_str().contains(['*', '?']);
        let in_pool = self
            .pools
            .values()
            .any(|p| p.provider == provider && p.models.iter().any(literal));
        in_pool
            || self.prices.iter().any(|rule| {
                rule.provider.as_deref().is_none_or(|p| p == provider) && literal(&rule.models)
            })
    }

    /// The `[prices]` entries, most specific first.
    pub fn prices(&self) -> &[PriceRule] {
        &self.prices
    }

    /// The configured provider names, for error messages.
    pub fn provider_names(&self) -> String {
        self.providers
            .keys()
            .cloned()
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Where a call of `model` on `provider` with `connection`'s key goes and what it spends;
    /// `None` when the provider is not configured.
    pub fn place(&self, provider: &str, model: &str, connection: &Connection) -> Option<Placement> {
        let p = self.providers.get(provider)?;
        let pool = self.pools.values().find(|pool| {
            pool.provider == provider
                && (pool.keys == PoolKeys::Each || *connection == Connection::Platform)
                && pool.models.iter().any(|g| g.matches(model))
        });
        Some(Placement {
            dialect: p.dialect,
            day: pool.map_or(p.dialect.day(), |pool| self.day_clock(pool)),
            pace: pool.map(Pool::limits),
            pool: pool.map(|pool| match pool.keys {
                PoolKeys::Platform => pool.name.clone(),
                PoolKeys::Each => format!("{}@{}", pool.name, connection.id()),
            }),
        })
    }

    /// The limits and day clock of a pool instance (`{pool}` or `{pool}@{connection}`, as
    /// [`Catalog::place`] names them), for work on a pool that no route is at hand for (the
    /// replicas' handing out of slots to waiting runs); `None` for an instance of no pool.
    pub fn instance(&self, instance: &str) -> Option<(Limits, DayClock)> {
        let name = instance.split_once('@').map_or(instance, |(name, _)| name);
        let pool = self.pools.get(name)?;
        Some((pool.limits(), self.day_clock(pool)))
    }

    /// When `pool`'s spent day comes back: its `day_reset`, else its provider's dialect's day.
    pub fn day_clock(&self, pool: &Pool) -> DayClock {
        match pool.day_reset {
            Some(zone) => DayClock::Fixed(zone),
            None => self
                .providers
                .get(&pool.provider)
                .map_or(DayClock::Rolling, |p| p.dialect.day()),
        }
    }

    /// Whether `id` may not name a user's connection: `platform`, and every provider's name (a
    /// connection called `groq` would read, in logs and on the board, as the platform's).
    pub fn is_reserved_connection_id(&self, id: &str) -> bool {
        id == "platform" || self.providers.contains_key(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_builtin_catalog_places_free_models_in_the_free_pool_on_the_platform_key_only() {
        let c = Catalog::builtin();
        let free = c
            .place(
                OPENROUTER,
                "meta-llama/llama-3.3-70b-instruct:free",
                &Connection::Platform,
            )
            .unwrap();
        assert_eq!(free.pool.as_deref(), Some(OPENROUTER_FREE_POOL));
        assert_eq!(
            (free.dialect, free.day),
            (Dialect::Openrouter, DayClock::Fixed(chrono_tz::UTC))
        );
        let router = c
            .place(OPENROUTER, "openrouter/free", &Connection::Platform)
            .unwrap();
        assert_eq!(router.pool.as_deref(), Some(OPENROUTER_FREE_POOL));
        let paid = c
            .place(OPENROUTER, "openai/gpt-4o-mini", &Connection::Platform)
            .unwrap();
        assert_eq!(paid.pool, None);
        let own = Connection::User("conn_1".into());
        assert_eq!(c.place(OPENROUTER, "x/y:free", &own).unwrap().pool, None);
        assert_eq!(c.place("groq", "llama", &Connection::Platform), None);
    }
}
