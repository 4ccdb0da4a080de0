//! Configuration from the environment (docs/api.md §3), checked once at start-up.
//!
//! Every binary reads the same variables; a bad value is reported as one [`ConfigError`] line
//! that names the variable, never as a panic.

use crate::catalog::Catalog;
use crate::provider::{ApiKey, EnvTargets, Http2};
use crate::store::{SecretKey, SecretKeyError, SecretKeys};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

pub use crate::error::ConfigError;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Pretty,
    Json,
}

/// The settings every binary shares.
#[derive(Debug, Clone)]
pub struct Settings {
    pub redis_url: String,
    pub database_url: String,
    pub namespace: String,
    /// The providers and pools: built in, merged with `FREEWAY_CONFIG`.
    pub catalog: Arc<Catalog>,
    /// Each provider's platform key, read from the variable its `api_key_env` names.
    pub platform_keys: BTreeMap<String, ApiKey>,
    pub tool_url: Option<String>,
    pub summary: bool,
    /// `FREEWAY_LEARN_LIMITS` (default `on`): pools learn what their providers state; `off`
    /// paces by the configuration alone (the benchmarks compare the two).
    pub learn_limits: bool,
    pub log_format: LogFormat,
    /// `FREEWAY_HTTP2` (default `negotiated`): HTTP/2 where TLS negotiates it, or
    /// `prior-knowledge`, HTTP/2 over cleartext too (an `http://` gateway that speaks h2c).
    pub http2: Http2,
    /// `FREEWAY_SECRET_KEY`: seals users' connection keys in the store; without it user
    /// connections cannot be stored or used.
    pub secret_key: Option<SecretKey>,
    /// `FREEWAY_SECRET_KEY_PREVIOUS`: the key being rotated out; keys it sealed still open until
    /// `worker reseal-keys` seals them with `FREEWAY_SECRET_KEY`.
    pub previous_secret_key: Option<SecretKey>,
    /// `FREEWAY_API_TOKEN`: the bearer token every `/v1` route needs; without it the API binds
    /// only to loopback. Never printed (its `Debug` is redacted).
    pub api_token: Option<ApiKey>,
    /// `FREEWAY_ADMIN_TOKEN`: the bearer token of the operator's rest clear.
    pub admin_token: Option<ApiKey>,
    /// `FREEWAY_METRICS_TOKEN`: a bearer token that opens `/metrics` only, for a scraper.
    pub metrics_token: Option<ApiKey>,
    /// `FREEWAY_MAX_STREAMS` (default [`DEFAULT_MAX_STREAMS`]): the event streams one producer
    /// serves at once; past it a new one is refused until another ends.
    pub max_streams: usize,
    /// `FREEWAY_RATE_LIMIT` (default [`DEFAULT_RATE_LIMIT`]): requests a second per credential.
    pub rate_limit: u32,
    /// `FREEWAY_EVENTS_KEEP_S` (default [`crate::events::DEFAULT_EVENTS_KEEP_S`]): how long a
    /// run's event stream stays in Redis after its last event.
    pub events_keep_s: u64,
    /// `FREEWAY_QUEUES` (default 1, at most [`MAX_QUEUES`]): the queue names runs are spread
    /// over by id, so that on a cluster the queue is not one slot; every process of a fleet is
    /// given the same number.
    pub queues: usize,
    /// `FREEWAY_CORS_ORIGINS`: the web app origins (`scheme://host[:port]`, comma-separated)
    /// whose pages may open a run's event stream with its `events_url`.
    pub cors_origins: Vec<String>,
}

/// The shortest bearer token (`FREEWAY_API_TOKEN`, `FREEWAY_ADMIN_TOKEN`,
/// `FREEWAY_METRICS_TOKEN`), in characters: a token is all that stands between the network and
/// the API, so it must be too long to guess by trying (`openssl rand -hex 32` gives 64).
pub const MIN_TOKEN_CHARS: usize = 16;
/// The most queue names `FREEWAY_QUEUES` may spread runs over: every replica polls each.
pub const MAX_QUEUES: usize = 64;
/// The longest `FREEWAY_EVENTS_KEEP_S`: a week.
const MAX_EVENTS_KEEP_S: u64 = 7 * 24 * 3600;
/// Requests a second one token may send the producer unless `FREEWAY_RATE_LIMIT` says otherwise
/// (in bursts of twice that; a run's signed URL a hundredth): a web app's backend sends every
/// user's requests with one token, so this is a safety valve near what a producer serves on two
/// cores, not a quota.
pub const DEFAULT_RATE_LIMIT: u32 = 2_000;
const MAX_RATE_LIMIT: u32 = 1_000_000;
/// Event streams one producer serves at once unless `FREEWAY_MAX_STREAMS` says otherwise.
pub const DEFAULT_MAX_STREAMS: usize = 1_000;
/// The largest `FREEWAY_MAX_STREAMS`: far past what one process's file descriptors allow.
const MAX_MAX_STREAMS: usize = 1_000_000;

impl Settings {
    /// The keys that open users' connection keys; `None` without `FREEWAY_SECRET_KEY`.
    pub fn secret_keys(&self) -> Option<SecretKeys> {
        Some(SecretKeys {
            current: self.secret_key.clone()?,
            previous: self.previous_secret_key.clone(),
        })
    }

    /// For the binaries that call providers: every platform-keyed pool's provider has its key.
    pub fn require_platform_keys(&self) -> Result<(), ConfigError> {
        self.catalog.check_platform_keys(&self.platform_keys)
    }

    /// Where calls go and with which platform keys.
    pub fn env_targets(&self) -> EnvTargets {
        EnvTargets::new(self.catalog.clone(), self.platform_keys.clone())
    }

    /// Read the process environment.
    pub fn from_env() -> Result<Settings, ConfigError> {
        Self::from_vars(&std::env::vars().collect())
    }

    /// Read settings from a map of variables (the process environment in production).
    pub fn from_vars(vars: &HashMap<String, String>) -> Result<Settings, ConfigError> {
        let get = |k: &str| vars.get(k).map(|v| v.trim()).filter(|v| !v.is_empty());
        let mut redis_url = get("REDIS_URL")
            .unwrap_or("redis://127.0.0.1:6379")
            .to_string();
        let schemes = [
            "redis://",
            "rediss://",
            "redis+cluster://",
            "rediss+cluster://",
        ];
        if !schemes.iter().any(|s| redis_url.starts_with(s)) {
            return Err(ConfigError::new(
                "REDIS_URL",
                "must start with redis://, rediss:// or (a cluster) redis+cluster://",
            ));
        }
        // `FREEWAY_REDIS_CLUSTER=on`: the URL's hosts are a cluster's seed nodes.
        match get("FREEWAY_REDIS_CLUSTER") {
            None | Some("off") => {}
            Some("on") => {
                if !redis_url.contains("+cluster://") {
                    redis_url = redis_url.replacen("://", "+cluster://", 1);
                }
            }
            Some(_) => {
                return Err(ConfigError::new(
                    "FREEWAY_REDIS_CLUSTER",
                    "must be on or off",
                ));
            }
        }
        if let Err(why) = crate::connect::RedisTarget::parse(&redis_url) {
            return Err(ConfigError::new("REDIS_URL", why));
        }
        let database_url = get("DATABASE_URL")
            .unwrap_or("sqlite://freeway.db")
            .to_string();
        let namespace = get("FREEWAY_NAMESPACE").unwrap_or("freeway").to_string();
        let ns_ok = namespace.len() <= 64
            && namespace
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
        if !ns_ok {
            return Err(ConfigError::new(
                "FREEWAY_NAMESPACE",
                "must be 1-64 characters of [A-Za-z0-9_.-]",
            ));
        }
        let catalog = crate::catalog::load(vars)?;
        let platform_keys = catalog
            .providers()
            .filter_map(|p| {
                let key = get(p.api_key_env.as_deref()?)?;
                Some((p.name.clone(), ApiKey::new(key)))
            })
            .collect();
        let tool_url = get("FREEWAY_TOOL_URL")
            .map(|u| http_url("FREEWAY_TOOL_URL", u))
            .transpose()?;
        let summary = one_of(
            get("FREEWAY_SUMMARY"),
            "FREEWAY_SUMMARY",
            "off",
            &[("on", true), ("off", false)],
        )?;
        let learn_limits = one_of(
            get("FREEWAY_LEARN_LIMITS"),
            "FREEWAY_LEARN_LIMITS",
            "on",
            &[("on", true), ("off", false)],
        )?;
        let http2 = one_of(
            get("FREEWAY_HTTP2"),
            "FREEWAY_HTTP2",
            "negotiated",
            &[
                ("negotiated", Http2::Negotiated),
                ("prior-knowledge", Http2::PriorKnowledge),
            ],
        )?;
        let log_format = one_of(
            get("FREEWAY_LOG_FORMAT"),
            "FREEWAY_LOG_FORMAT",
            "pretty",
            &[("json", LogFormat::Json), ("pretty", LogFormat::Pretty)],
        )?;
        let secret = |var: &'static str, parse: fn(&str) -> Result<SecretKey, SecretKeyError>| {
            get(var)
                .map(parse)
                .transpose()
                .map_err(|e| ConfigError::new(var, e.to_string()))
        };
        let secret_key = secret("FREEWAY_SECRET_KEY", SecretKey::from_hex)?;
        // The key being rotated out may be weak: rotating is how one gets rid of a weak key.
        let previous_secret_key =
            secret("FREEWAY_SECRET_KEY_PREVIOUS", SecretKey::from_hex_retiring)?;
        if previous_secret_key.is_some() && secret_key.is_none() {
            return Err(ConfigError::new(
                "FREEWAY_SECRET_KEY_PREVIOUS",
                "is only for rotating FREEWAY_SECRET_KEY, which is not set".to_string(),
            ));
        }
        let max_streams = number_in(
            get("FREEWAY_MAX_STREAMS"),
            "FREEWAY_MAX_STREAMS",
            1..=MAX_MAX_STREAMS,
            DEFAULT_MAX_STREAMS,
        )?;
        let rate_limit = number_in(
            get("FREEWAY_RATE_LIMIT"),
            "FREEWAY_RATE_LIMIT",
            1..=MAX_RATE_LIMIT,
            DEFAULT_RATE_LIMIT,
        )?;
        let events_keep_s = number_in(
            get("FREEWAY_EVENTS_KEEP_S"),
            "FREEWAY_EVENTS_KEEP_S",
            1..=MAX_EVENTS_KEEP_S,
            crate::events::DEFAULT_EVENTS_KEEP_S,
        )?;
        let queues = number_in(get("FREEWAY_QUEUES"), "FREEWAY_QUEUES", 1..=MAX_QUEUES, 1)?;
        let token = |var: &'static str| -> Result<Option<ApiKey>, ConfigError> {
            let Some(value) = get(var) else {
                return Ok(None);
            };
            let chars = value.chars().count();
            if chars < MIN_TOKEN_CHARS {
                return Err(ConfigError::new(
                    var,
                    format!(
                        "must be at least {MIN_TOKEN_CHARS} characters, got {chars} (generate one \
                         with `openssl rand -hex 32`)"
                    ),
                ));
            }
            Ok(Some(ApiKey::new(value)))
        };
        let api_token = token("FREEWAY_API_TOKEN")?;
        let admin_token = token("FREEWAY_ADMIN_TOKEN")?;
        let metrics_token = token("FREEWAY_METRICS_TOKEN")?;
        distinct_tokens(&[
            ("FREEWAY_API_TOKEN", &api_token),
            ("FREEWAY_ADMIN_TOKEN", &admin_token),
            ("FREEWAY_METRICS_TOKEN", &metrics_token),
        ])?;
        Ok(Settings {
            redis_url,
            database_url,
            namespace,
            catalog: Arc::new(catalog),
            platform_keys,
            tool_url,
            summary,
            learn_limits,
            log_format,
            http2,
            secret_key,
            previous_secret_key,
            api_token,
            admin_token,
            metrics_token,
            max_streams,
            rate_limit,
            events_keep_s,
            queues,
            cors_origins: get("FREEWAY_CORS_ORIGINS")
                .map(cors_origins)
                .transpose()?
                .unwrap_or_default(),
        })
    }
}

/// The bearer tokens are of different roles (the API's, the operator's, a scraper's), so no two
/// may be the same secret: of two that are, the later variable is refused (its value never shown).
fn distinct_tokens(tokens: &[(&'static str, &Option<ApiKey>)]) -> Result<(), ConfigError> {
    for (i, (first, a)) in tokens.iter().enumerate() {
        for (second, b) in &tokens[i + 1..] {
            if let (Some(a), Some(b)) = (a, b)
                && a.expose() == b.expose()
            {
                return Err(ConfigError::new(
                    second,
                    format!(
                        "must not be the same token as {first}: the two roles need two secrets"
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// `scheme://host[:port]` origins, comma-separated: exactly what a browser sends in `Origin`.
fn cors_origins(value: &str) -> Result<Vec<String>, ConfigError> {
    let bad = |o: &str| {
        ConfigError::new(
            "FREEWAY_CORS_ORIGINS",
            format!("{o:?} is not an origin (scheme://host[:port], no path)"),
        )
    };
    value
        .split(',')
        .map(str::trim)
        .filter(|o| !o.is_empty())
        .map(|o| {
            let rest = o
                .strip_prefix("https://")
                .or_else(|| o.strip_prefix("http://"))
                .ok_or_else(|| bad(o))?;
            let ok = !rest.is_empty()
                && rest.bytes().all(|b| {
                    b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b':' | b'[' | b']')
                });
            ok.then(|| o.to_string()).ok_or_else(|| bad(o))
        })
        .collect()
}

/// `value` of `var` as one of `choices` by name, the one named `default` when unset.
fn one_of<T: Copy>(
    value: Option<&str>,
    var: &'static str,
    default: &str,
    choices: &[(&str, T)],
) -> Result<T, ConfigError> {
    let name = value.unwrap_or(default);
    choices
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, choice)| *choice)
        .ok_or_else(|| {
            let names: Vec<&str> = choices.iter().map(|(n, _)| *n).collect();
            ConfigError::new(var, format!("must be {}, got {name:?}", names.join(" or ")))
        })
}

/// `value` of `var` as a whole number within `range`, `default` when unset.
fn number_in<T>(
    value: Option<&str>,
    var: &'static str,
    range: std::ops::RangeInclusive<T>,
    default: T,
) -> Result<T, ConfigError>
where
    T: std::str::FromStr + PartialOrd + std::fmt::Display,
{
    let Some(v) = value else {
        return Ok(default);
    };
    v.parse::<T>()
        .ok()
        .filter(|n| range.contains(n))
        .ok_or_else(|| {
            ConfigError::new(
                var,
                format!(
                    "must be a number from {} to {}, got {v:?}",
                    range.start(),
                    range.end()
                ),
            )
        })
}

/// An `http(s)://` URL without a trailing slash.
fn http_url(var: &'static str, value: &str) -> Result<String, ConfigError> {
    crate::catalog::http_url(value).map_err(|m| ConfigError::new(var, m))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn defaults_follow_the_spec() {
        let s = Settings::from_vars(&vars(&[])).unwrap();
        assert_eq!(s.redis_url, "redis://127.0.0.1:6379");
        assert_eq!(s.database_url, "sqlite://freeway.db");
        assert_eq!(s.namespace, "freeway");
        let openrouter = s.catalog.provider("openrouter").unwrap();
        assert_eq!(openrouter.base_url, "https://openrouter.ai/api/v1");
        assert!(s.platform_keys.is_empty());
        assert!(!s.summary);
        assert!(
            s.learn_limits,
            "pools learn what providers state unless told not to"
        );
        assert_eq!(s.http2, Http2::Negotiated);
    }

    #[test]
    fn freeway_queues_is_one_by_default_and_at_most_max_queues() {
        assert_eq!(Settings::from_vars(&vars(&[])).unwrap().queues, 1);
        let three = Settings::from_vars(&vars(&[("FREEWAY_QUEUES", "3")])).unwrap();
        assert_eq!(three.queues, 3);
        for bad in ["0", "65", "-1", "three"] {
            let e = Settings::from_vars(&vars(&[("FREEWAY_QUEUES", bad)])).unwrap_err();
            assert_eq!(e.var, "FREEWAY_QUEUES", "{bad}");
        }
    }

    #[test]
    fn a_cluster_is_named_by_its_scheme_or_by_freeway_redis_cluster() {
        let url = |pairs: &[(&str, &str)]| Settings::from_vars(&vars(pairs)).map(|s| s.redis_url);
        let nodes = "redis+cluster://h1:7000,h2:7001";
        assert_eq!(url(&[("REDIS_URL", nodes)]).unwrap(), nodes);
        assert_eq!(
            url(&[
                ("REDIS_URL", "redis://h1:7000,h2:7001"),
                ("FREEWAY_REDIS_CLUSTER", "on")
            ])
            .unwrap(),
            nodes
        );
        assert_eq!(
            url(&[
                ("REDIS_URL", "rediss://h1:7000"),
                ("FREEWAY_REDIS_CLUSTER", "on")
            ])
            .unwrap(),
            "rediss+cluster://h1:7000"
        );
        let e = Settings::from_vars(&vars(&[("FREEWAY_REDIS_CLUSTER", "yes")])).unwrap_err();
        assert_eq!(e.var, "FREEWAY_REDIS_CLUSTER");
        let e = Settings::from_vars(&vars(&[("REDIS_URL", "redis+cluster://,")])).unwrap_err();
        assert_eq!(e.var, "REDIS_URL");
    }

    #[test]
    fn bad_values_name_their_variable() {
        let e = Settings::from_vars(&vars(&[("FREEWAY_SUMMARY", "yes")])).unwrap_err();
        assert_eq!(e.var, "FREEWAY_SUMMARY");
        let e = Settings::from_vars(&vars(&[("FREEWAY_HTTP2", "h2")])).unwrap_err();
        assert_eq!(e.var, "FREEWAY_HTTP2");
        let e = Settings::from_vars(&vars(&[("FREEWAY_LEARN_LIMITS", "maybe")])).unwrap_err();
        assert_eq!(e.var, "FREEWAY_LEARN_LIMITS");
        let s = Settings::from_vars(&vars(&[("FREEWAY_LEARN_LIMITS", "off")])).unwrap();
        assert!(!s.learn_limits);
        let s = Settings::from_vars(&vars(&[("FREEWAY_HTTP2", "prior-knowledge")])).unwrap();
        assert_eq!(s.http2, Http2::PriorKnowledge);
        let e = Settings::from_vars(&vars(&[("REDIS_URL", "localhost:6379")])).unwrap_err();
        assert_eq!(e.var, "REDIS_URL");
        let e = Settings::from_vars(&vars(&[("OPENROUTER_BASE_URL", "ftp://x")])).unwrap_err();
        assert_eq!(e.var, "OPENROUTER_BASE_URL");
        for bad in [
            "*",
            "example.com",
            "https://app.example/path",
            "http://",
            "https://a b",
        ] {
            let e = Settings::from_vars(&vars(&[("FREEWAY_CORS_ORIGINS", bad)])).unwrap_err();
            assert_eq!(e.var, "FREEWAY_CORS_ORIGINS", "{bad}");
        }
        let s = Settings::from_vars(&vars(&[(
            "FREEWAY_CORS_ORIGINS",
            " https://app.example , http://127.0.0.1:3000",
        )]))
        .unwrap();
        assert_eq!(
            s.cors_origins,
            ["https://app.example", "http://127.0.0.1:3000"]
        );
    }

    #[test]
    fn the_key_never_prints() {
        let s = Settings::from_vars(&vars(&[
            ("OPENROUTER_API_KEY", "sk-or-v1-hunter2"),
            ("FREEWAY_API_TOKEN", "api-hunter3-0123456789"),
            ("FREEWAY_ADMIN_TOKEN", "admin-hunter4-0123456789"),
        ]))
        .unwrap();
        let shown = format!("{s:?}");
        assert!(!shown.contains("hunter"), "{shown}");
        assert_eq!(
            s.api_token.as_ref().map(ApiKey::expose),
            Some("api-hunter3-0123456789")
        );
    }

    #[test]
    fn a_weak_secret_key_is_refused_but_may_be_the_one_rotated_out() {
        let zero = "00".repeat(32);
        let strong = "c7a1e04f92b6d3580e1f7a2c4b9d6e8305f1a7c2e9b4d60817c3f5a2e8d9b046";
        let e = Settings::from_vars(&vars(&[("FREEWAY_SECRET_KEY", &zero)])).unwrap_err();
        assert_eq!(e.var, "FREEWAY_SECRET_KEY");
        assert!(e.message.contains("all its bytes are the same"), "{e}");
        assert!(!e.to_string().contains(&zero[..8]), "no echo: {e}");
        let rotating = Settings::from_vars(&vars(&[
            ("FREEWAY_SECRET_KEY", strong),
            ("FREEWAY_SECRET_KEY_PREVIOUS", &zero),
        ]))
        .unwrap();
        assert!(rotating.secret_keys().is_some_and(|k| k.previous.is_some()));
    }

    #[test]
    fn tokens_are_long_and_distinct_and_never_shown() {
        let api = "api-token-5be3c1f09a7d";
        let admin = "admin-token-c4e18d2b77e0";
        let metrics = "metrics-token-29fa61c03b";
        let ok = Settings::from_vars(&vars(&[
            ("FREEWAY_API_TOKEN", api),
            ("FREEWAY_ADMIN_TOKEN", admin),
            ("FREEWAY_METRICS_TOKEN", metrics),
        ]))
        .unwrap();
        assert_eq!(ok.admin_token.as_ref().map(ApiKey::expose), Some(admin));
        let exactly = "0123456789abcdef";
        assert_eq!(exactly.len(), MIN_TOKEN_CHARS);
        assert!(Settings::from_vars(&vars(&[("FREEWAY_API_TOKEN", exactly)])).is_ok());
        for var in [
            "FREEWAY_API_TOKEN",
            "FREEWAY_ADMIN_TOKEN",
            "FREEWAY_METRICS_TOKEN",
        ] {
            for short in ["Q", "QQQQQQQQQQQQQQQ"] {
                let e = Settings::from_vars(&vars(&[(var, short)])).unwrap_err();
                assert_eq!(e.var, var);
                assert!(e.message.contains("at least 16 characters"), "{e}");
                assert!(!e.to_string().contains(short), "no echo: {e}");
            }
        }
        for (a, b) in [
            ("FREEWAY_API_TOKEN", "FREEWAY_ADMIN_TOKEN"),
            ("FREEWAY_API_TOKEN", "FREEWAY_METRICS_TOKEN"),
            ("FREEWAY_ADMIN_TOKEN", "FREEWAY_METRICS_TOKEN"),
        ] {
            let e = Settings::from_vars(&vars(&[(a, api), (b, api)])).unwrap_err();
            assert_eq!(e.var, b);
            assert!(e.message.contains(a), "{e}");
            assert!(!e.to_string().contains(api), "no echo: {e}");
        }
    }
}
