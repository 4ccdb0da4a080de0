//! `FREEWAY_CONFIG`: the TOML file of providers and pools, merged over the built-in catalog.
//!
//! Every binary reads it at start-up, and anything wrong with it is one line naming the file,
//! the key and the problem (the binaries exit 2): a configuration that is half understood would
//! rest or spend the wrong quota, which is worse than not starting. A provider or pool with a
//! built-in name keeps every built-in value the file does not set, so `[pools.openrouter-free]`
//! with only `rpd = 1000` is a complete file; so does the built-in tier `default`. (v3) Tiers and
//! prices carry money: a negative or non-finite cap or price is refused, never read as "none".

use super::prices::{self, Price, PriceRule};
use super::{
    Catalog, DEFAULT_CANARY_EVERY_S, Glob, OPENROUTER, Pool, PoolKeys, Provider, Tier, Window,
};
use crate::dialect::Dialect;
use crate::error::ConfigError;
use serde::Deserialize;
use std::collections::{BTreeMap, HashMap};

const VAR: &str = "FREEWAY_CONFIG";

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    providers: BTreeMap<String, ProviderEntry>,
    #[serde(default)]
    pools: BTreeMap<String, PoolEntry>,
    #[serde(default)]
    tiers: BTreeMap<String, TierEntry>,
    /// `PROVIDER:GLOB` or `GLOB` → USD per million tokens.
    #[serde(default)]
    prices: BTreeMap<String, PriceEntry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TierEntry {
    weight: Option<u32>,
    spend_usd_per_day: Option<f64>,
    day_reset: Option<String>,
}

/// Both figures are required: a price missing one would make that half of every call free.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PriceEntry {
    input: f64,
    output: f64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ProviderEntry {
    base_url: Option<String>,
    api_key_env: Option<String>,
    dialect: Option<Dialect>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PoolEntry {
    provider: Option<String>,
    models: Option<Vec<String>>,
    connection: Option<PoolKeys>,
    rpm: Option<u32>,
    rpd: Option<u32>,
    tpm: Option<u32>,
    tpd: Option<u32>,
    window: Option<Window>,
    window_s: Option<u32>,
    day_reset: Option<String>,
    canary_every: Option<String>,
    pin: Option<bool>,
}

/// The catalog the environment describes: `FREEWAY_CONFIG`'s file (if set) over the built-in
/// one, with `OPENROUTER_BASE_URL` (if set) winning for OpenRouter.
pub fn load(vars: &HashMap<String, String>) -> Result<Catalog, ConfigError> {
    let get = |k: &str| vars.get(k).map(|v| v.trim()).filter(|v| !v.is_empty());
    let mut catalog = Catalog::builtin();
    if let Some(path) = get(VAR) {
        let text = std::fs::read_to_string(path)
            .map_err(|e| ConfigError::new(VAR, format!("cannot read {path}: {e}")))?;
        merge(&mut catalog, &text).map_err(|m| ConfigError::new(VAR, format!("{path}: {m}")))?;
    }
    if let Some(url) = get("OPENROUTER_BASE_URL") {
        let url = http_url(url).map_err(|m| ConfigError::new("OPENROUTER_BASE_URL", m))?;
        if let Some(p) = catalog.providers.get_mut(OPENROUTER) {
            p.base_url = url;
        }
    }
    Ok(catalog)
}

impl Catalog {
    /// The built-in catalog with the TOML `text` merged over it, as `FREEWAY_CONFIG` would be;
    /// the error names the key and the problem.
    pub fn from_toml(text: &str) -> Result<Catalog, ConfigError> {
        let mut catalog = Catalog::builtin();
        merge(&mut catalog, text).map_err(|m| ConfigError::new(VAR, m))?;
        Ok(catalog)
    }

    /// Every provider that a platform-keyed pool calls must have its key variable set: such a
    /// pool would otherwise skip every call (`connection_missing`) while looking configured.
    /// The built-in OpenRouter is exempt, as it always was: without a key freeway still serves
    /// users' own connections and the simulator.
    /// `keys` holds the providers whose platform key is set.
    pub fn check_platform_keys<T>(&self, keys: &BTreeMap<String, T>) -> Result<(), ConfigError> {
        for pool in self.pools.values().filter(|p| p.keys == PoolKeys::Platform) {
            let Some(provider) = self.providers.get(&pool.provider) else {
                continue;
            };
            if provider.name == OPENROUTER {
                continue;
            }
            match &provider.api_key_env {
                Some(_) if keys.contains_key(&provider.name) => {}
                Some(var) => {
                    return Err(ConfigError::new(
                        VAR,
                        format!(
                            "providers.{}.api_key_env: {var} is not set, and pools.{} \
                             (connection = \"platform\") needs it",
                            provider.name, pool.name
                        ),
                    ));
                }
                None => {
                    return Err(ConfigError::new(
                        VAR,
                        format!(
                            "providers.{}: no api_key_env, and pools.{} (connection = \
                             \"platform\") needs the platform key",
                            provider.name, pool.name
                        ),
                    ));
                }
            }
        }
        Ok(())
    }
}

/// Apply the file's text to `catalog`; the error is `key: problem` (or `line N: problem` when
/// the TOML itself is wrong).
fn merge(catalog: &mut Catalog, text: &str) -> Result<(), String> {
    let file: File = toml::from_str(text).map_err(|e| {
        let line = e
            .span()
            .map(|s| text[..s.start.min(text.len())].lines().count().max(1));
        let message = e.message().replace('\n', " ");
        match line {
            Some(n) => format!("line {n}: {message}"),
            None => message,
        }
    })?;
    for (name, entry) in file.providers {
        let key = format!("providers.{name}");
        check_name(&key, &name)?;
        let builtin = catalog.providers.remove(&name);
        let base_url = match (entry.base_url, &builtin) {
            (Some(url), _) => http_url(&url).map_err(|m| format!("{key}.base_url: {m}"))?,
            (None, Some(b)) => b.base_url.clone(),
            (None, None) => return Err(format!("{key}.base_url: missing")),
        };
        if let Some(var) = &entry.api_key_env
            && !is_env_name(var)
        {
            return Err(format!("{key}.api_key_env: {var:?} is not a variable name"));
        }
        let provider = Provider {
            base_url,
            api_key_env: entry
                .api_key_env
                .or_else(|| builtin.as_ref().and_then(|b| b.api_key_env.clone())),
            dialect: entry
                .dialect
                .or(builtin.as_ref().map(|b| b.dialect))
                .unwrap_or(Dialect::Generic),
            name: name.clone(),
        };
        catalog.providers.insert(name, provider);
    }
    for (name, entry) in file.pools {
        let key = format!("pools.{name}");
        check_name(&key, &name)?;
        let builtin = catalog.pools.remove(&name);
        let pool = pool(&key, name.clone(), entry, builtin)?;
        if !catalog.providers.contains_key(&pool.provider) {
            return Err(format!(
                "{key}.provider: {:?} is not a configured provider (configured: {})",
                pool.provider,
                catalog.provider_names()
            ));
        }
        catalog.pools.insert(name, pool);
    }
    for (name, entry) in file.tiers {
        let key = format!("tiers.{name}");
        check_name(&key, &name)?;
        let builtin = catalog.tiers.remove(&name).unwrap_or_default();
        let tier = tier(&key, entry, builtin)?;
        catalog.tiers.insert(name, tier);
    }
    for (text, entry) in file.prices {
        // After the providers: whether `PROVIDER:` names one depends on the file's own.
        let rule = price_rule(catalog, text, entry)?;
        catalog.prices.push(rule);
    }
    prices::order(&mut catalog.prices);
    claimed_once(catalog)
}

/// A tier from its entry over `builtin` (the built-in `default`, or a new tier's defaults).
fn tier(key: &str, e: TierEntry, builtin: Tier) -> Result<Tier, String> {
    let weight = e.weight.unwrap_or(builtin.weight);
    if weight == 0 {
        return Err(format!("{key}.weight: must be at least 1"));
    }
    let spend_usd_per_day = match e.spend_usd_per_day {
        Some(usd) => Some(usd_amount(usd).map_err(|m| format!("{key}.spend_usd_per_day: {m}"))?),
        None => builtin.spend_usd_per_day,
    };
    let day_reset = match e.day_reset {
        Some(zone) => zone
            .parse::<chrono_tz::Tz>()
            .map_err(|_| format!("{key}.day_reset: unknown time zone {zone:?}"))?,
        None => builtin.day_reset,
    };
    Ok(Tier {
        weight,
        spend_usd_per_day,
        day_reset,
    })
}

/// `[prices]`'s `text = { input, output }`: `PROVIDER:` counts only when it names a configured
/// provider (as on the command lines), so `vendor/model:free` stays a model glob.
fn price_rule(catalog: &Catalog, text: String, e: PriceEntry) -> Result<PriceRule, String> {
    let key = format!("prices.{text:?}");
    let (provider, glob) = match text.split_once(':') {
        Some((p, glob)) if catalog.providers.contains_key(p) => (Some(p.to_string()), glob),
        _ => (None, text.as_str()),
    };
    let models = Glob::parse(glob).map_err(|m| format!("{key}: bad glob {glob:?}: {m}"))?;
    let price = Price {
        input: usd_amount(e.input).map_err(|m| format!("{key}.input: {m}"))?,
        output: usd_amount(e.output).map_err(|m| format!("{key}.output: {m}"))?,
    };
    Ok(PriceRule {
        key: text,
        provider,
        models,
        price,
    })
}

/// An amount of USD: TOML also spells `nan` and `inf`, which no cap or price can mean.
fn usd_amount(v: f64) -> Result<f64, String> {
    if v.is_finite() && v >= 0.0 {
        Ok(v)
    } else {
        Err(format!("must be a finite number of at least 0, got {v}"))
    }
}

fn pool(key: &str, name: String, e: PoolEntry, builtin: Option<Pool>) -> Result<Pool, String> {
    let provider = match (e.provider, &builtin) {
        (Some(p), _) => p,
        (None, Some(b)) => b.provider.clone(),
        (None, None) => return Err(format!("{key}.provider: missing")),
    };
    let models = match (e.models, &builtin) {
        (Some(globs), _) if globs.is_empty() => return Err(format!("{key}.models: empty")),
        (Some(globs), _) => globs
            .iter()
            .map(|g| Glob::parse(g).map_err(|m| format!("{key}.models: bad glob {g:?}: {m}")))
            .collect::<Result<Vec<_>, _>>()?,
        (None, Some(b)) => b.models.clone(),
        (None, None) => return Err(format!("{key}.models: missing")),
    };
    let day_reset = match (e.day_reset, &builtin) {
        (Some(zone), _) => Some(
            zone.parse::<chrono_tz::Tz>()
                .map_err(|_| format!("{key}.day_reset: unknown time zone {zone:?}"))?,
        ),
        (None, b) => b.as_ref().and_then(|b| b.day_reset),
    };
    let canary_every_s = match (e.canary_every, &builtin) {
        (Some(every), _) => parse_every(&every).map_err(|m| format!("{key}.canary_every: {m}"))?,
        (None, Some(b)) => b.canary_every_s,
        (None, None) => Some(DEFAULT_CANARY_EVERY_S),
    };
    let window_s = e
        .window_s
        .or(builtin.as_ref().map(|b| b.window_s))
        .unwrap_or(60);
    if window_s == 0 {
        return Err(format!("{key}.window_s: must be at least 1"));
    }
    let limit = |file: Option<u32>, field: &str, of: fn(&Pool) -> Option<u32>| match file {
        Some(0) => Err(format!("{key}.{field}: must be at least 1")),
        Some(n) => Ok(Some(n)),
        None => Ok(builtin.as_ref().and_then(of)),
    };
    Ok(Pool {
        rpm: limit(e.rpm, "rpm", |b| b.rpm)?,
        rpd: limit(e.rpd, "rpd", |b| b.rpd)?,
        tpm: limit(e.tpm, "tpm", |b| b.tpm)?,
        tpd: limit(e.tpd, "tpd", |b| b.tpd)?,
        keys: e
            .connection
            .or(builtin.as_ref().map(|b| b.keys))
            .unwrap_or(PoolKeys::Platform),
        window: e
            .window
            .or(builtin.as_ref().map(|b| b.window))
            .unwrap_or(Window::Fixed),
        name,
        provider,
        models,
        window_s,
        day_reset,
        canary_every_s,
        pin: e.pin.or(builtin.as_ref().map(|b| b.pin)).unwrap_or(false),
    })
}

/// A route belongs to at most one pool: two pools of one provider whose globs can both match a
/// model would split one quota's count, so the file is refused.
fn claimed_once(catalog: &Catalog) -> Result<(), String> {
    let pools: Vec<&Pool> = catalog.pools.values().collect();
    for (i, a) in pools.iter().enumerate() {
        for b in &pools[i + 1..] {
            if a.provider != b.provider {
                continue;
            }
            for ga in &a.models {
                if let Some(gb) = b.models.iter().find(|gb| ga.overlaps(gb)) {
                    return Err(format!(
                        "pools.{} and pools.{} both claim models on {}: {:?} and {:?} can \
                         match the same model",
                        a.name,
                        b.name,
                        a.provider,
                        ga.as_str(),
                        gb.as_str()
                    ));
                }
            }
        }
    }
    Ok(())
}

/// Names end up inside Redis keys and their hash tags (`{pool}`), and in `{pool}@{connection}`.
fn check_name(key: &str, name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'_' | b'-'))
        && !["route", "conn", "platform"].contains(&name);
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{key}: a name is 1-64 characters of [a-z0-9_-], and not route, conn or platform"
        ))
    }
}

fn is_env_name(var: &str) -> bool {
    !var.is_empty()
        && var.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
        && !var.as_bytes()[0].is_ascii_digit()
}

/// An `http(s)://` URL without a trailing slash.
pub(crate) fn http_url(value: &str) -> Result<String, String> {
    if !(value.starts_with("http://") || value.starts_with("https://")) {
        return Err(format!("must be an http:// or https:// URL, got {value:?}"));
    }
    Ok(value.trim_end_matches('/').to_string())
}

/// The longest duration the file may give (`canary_every`): a year, in seconds. A period becomes
/// milliseconds for Redis (`PX`, whose expiry must stay within a signed 64-bit count of ms from
/// now) and for the worker's timers; a bound far below both keeps every such product exact, and a
/// canary rarer than yearly is better said as `off`.
const MAX_DURATION_S: u64 = 365 * 86_400;

/// `off`, or a number with a unit: `90s`, `30m`, `12h`, `7d`; at most [`MAX_DURATION_S`].
fn parse_every(text: &str) -> Result<Option<u64>, String> {
    if text == "off" {
        return Ok(None);
    }
    let bad = || format!("{text:?} is not off or a duration such as 12h or 7d");
    let split = text.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
    let (n, unit) = text.split_at(split);
    let scale = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => return Err(bad()),
    };
    if n.is_empty() {
        return Err(bad());
    }
    // Digits past u64 are a duration too, only a far too long one.
    match n.parse::<u64>().ok().and_then(|n| n.checked_mul(scale)) {
        Some(0) => Err(bad()),
        Some(s) if s <= MAX_DURATION_S => Ok(Some(s)),
        Some(_) | None => Err(format!(
            "{text:?} is longer than 365d, the longest (say off for none)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::connection::Connection;

    fn merged(text: &str) -> Result<Catalog, String> {
        let mut c = Catalog::builtin();
        merge(&mut c, text).map(|()| c)
    }

    const GROQ: &str = r#"
[providers.groq]
base_url = "https://api.groq.com/openai/v1"
api_key_env = "GROQ_API_KEY"
dialect = "groq"

[pools.groq-llama-70b]
provider = "groq"
models = ["llama-3.3-70b-versatile"]
connection = "each"
rpm = 30
rpd = 1000
tpm = 12000
tpd = 100000
window = "rolling"
"#;

    #[test]
    fn a_file_adds_providers_and_pools_and_a_builtin_pool_keeps_what_it_does_not_set() {
        let c = merged(&format!("{GROQ}\n[pools.openrouter-free]\nrpd = 1000\n")).unwrap();
        let free = c.pools.get("openrouter-free").unwrap();
        assert_eq!(
            (free.rpm, free.rpd, free.window_s),
            (Some(20), Some(1000), 60)
        );
        let groq = c.provider("groq").unwrap();
        assert_eq!(groq.dialect, Dialect::Groq);
        let mine = Connection::User("conn_x".into());
        let placed = c.place("groq", "llama-3.3-70b-versatile", &mine).unwrap();
        assert_eq!(placed.pool.as_deref(), Some("groq-llama-70b@conn_x"));
        let platform = c
            .place("groq", "llama-3.3-70b-versatile", &Connection::Platform)
            .unwrap();
        assert_eq!(platform.pool.as_deref(), Some("groq-llama-70b@platform"));
        assert_eq!(c.place("groq", "other-model", &mine).unwrap().pool, None);
    }

    #[test]
    fn every_bad_file_is_one_line_naming_the_key() {
        let cases = [
            ("[pools.openrouter-free]\nrpx = 3\n", "unknown field `rpx`"),
            (
                "[pools.p]\nprovider = \"openrouter\"\nmodels = [\"a[b\"]\n",
                "pools.p.models: bad glob",
            ),
            (
                "[pools.p]\nprovider = \"openrouter\"\nmodels = [\"x/*:free\"]\n",
                "pools.openrouter-free and pools.p both claim",
            ),
            (
                "[providers.x]\nbase_url = \"http://h\"\ndialect = \"klingon\"\n",
                "unknown variant `klingon`",
            ),
            (
                "[pools.openrouter-free]\nday_reset = \"Mars/Olympus\"\n",
                "pools.openrouter-free.day_reset: unknown time zone",
            ),
            (
                "[providers.x]\ndialect = \"groq\"\n",
                "providers.x.base_url: missing",
            ),
            (
                "[pools.p]\nprovider = \"nobody\"\nmodels = [\"m\"]\n",
                "pools.p.provider",
            ),
            (
                "[pools.openrouter-free]\nrpm = 0\n",
                "pools.openrouter-free.rpm",
            ),
            (
                "[pools.openrouter-free]\ncanary_every = \"soon\"\n",
                "canary_every",
            ),
            ("not toml at all", "line 1"),
            (
                "[tiers.pro]\nweight = 0\n",
                "tiers.pro.weight: must be at least 1",
            ),
            ("[tiers.pro]\nweight = -2\n", "line 2"),
            (
                "[tiers.pro]\nspend_usd_per_day = \"lots\"\n",
                "invalid type: string",
            ),
            (
                "[tiers.default]\nspend_usd_per_day = -1.0\n",
                "tiers.default.spend_usd_per_day: must be a finite number",
            ),
            (
                "[tiers.pro]\nspend_usd_per_day = nan\n",
                "tiers.pro.spend_usd_per_day",
            ),
            ("[tiers.pro]\ncap = 3\n", "unknown field `cap`"),
            (
                "[tiers.pro]\nday_reset = \"Mars/Olympus\"\n",
                "tiers.pro.day_reset: unknown time zone",
            ),
            ("[tiers.PRO]\n", "tiers.PRO: a name is"),
            (
                "[prices]\n\"x/y\" = { input = -0.5, output = 1 }\n",
                "prices.\"x/y\".input: must be a finite number",
            ),
            (
                "[prices]\n\"x/y\" = { input = 1, output = inf }\n",
                "prices.\"x/y\".output",
            ),
            (
                "[prices]\n\"x/y\" = { input = \"cheap\", output = 1 }\n",
                "invalid type: string",
            ),
            (
                "[prices]\n\"x/y\" = { input = 1 }\n",
                "missing field `output`",
            ),
            (
                "[prices]\n\"x/y\" = { input = 1, output = 1, cached = 0 }\n",
                "unknown field `cached`",
            ),
            (
                "[prices]\n\"openrouter:\" = { input = 1, output = 1 }\n",
                "prices.\"openrouter:\": bad glob",
            ),
        ];
        for (text, want) in cases {
            let e = merged(text).unwrap_err();
            assert!(e.contains(want), "{text:?}: {e}");
            assert!(!e.contains('\n'), "one line: {e}");
        }
    }

    #[test]
    fn tiers_merge_over_the_builtin_default_key_by_key() {
        let c = merged(
            "[tiers.default]\nspend_usd_per_day = 0.5\n\
             [tiers.pro]\nweight = 4\nday_reset = \"America/New_York\"\n",
        )
        .unwrap();
        let default = c.tier("default").unwrap();
        assert_eq!(
            (default.weight, default.spend_usd_per_day, default.day_reset),
            (1, Some(0.5), chrono_tz::UTC)
        );
        let pro = c.tier("pro").unwrap();
        assert_eq!(
            (pro.weight, pro.spend_usd_per_day, pro.day_reset),
            (4, None, chrono_tz::America::New_York)
        );
        assert_eq!(c.tier_names(), "default, pro");
        assert_eq!(Catalog::builtin().tier_names(), "default");
        assert!(c.tier("gold").is_none());
    }

    #[test]
    fn a_price_key_names_a_provider_only_when_one_is_configured() {
        let c = merged(&format!(
            "{GROQ}\n[prices]\n\"groq:*\" = {{ input = 0.5, output = 0.8 }}\n\
             \"vendor/m:free\" = {{ input = 9, output = 9 }}\n\
             \"openai/*\" = {{ input = 2.5, output = 10 }}\n\
             \"openai/gpt-4o-mini\" = {{ input = 0.15, output = 0.6 }}\n"
        ))
        .unwrap();
        let price = |p: &str, m: &str| c.price(p, m).map(|p| (p.input, p.output));
        assert_eq!(price("groq", "llama-3.3-70b-versatile"), Some((0.5, 0.8)));
        assert_eq!(price("groq", "openai/gpt-4o-mini"), Some((0.5, 0.8)));
        assert_eq!(price("openrouter", "openai/gpt-4o-mini"), Some((0.15, 0.6)));
        assert_eq!(price("openrouter", "openai/gpt-4o"), Some((2.5, 10.0)));
        // `vendor` is no provider: the whole key is a model glob, on any provider.
        assert_eq!(price("openrouter", "vendor/m:free"), Some((9.0, 9.0)));
        assert_eq!(price("openrouter", "meta/llama"), None);
        let rule = &c.prices()[0];
        assert_eq!(
            (rule.key.as_str(), rule.provider.as_deref()),
            ("groq:*", Some("groq"))
        );
    }

    #[test]
    fn a_platform_pool_needs_its_providers_key() {
        let c = merged(&GROQ.replace("\"each\"", "\"platform\"")).unwrap();
        let none = BTreeMap::<String, ()>::new();
        let e = c.check_platform_keys(&none).unwrap_err();
        assert!(e.message.contains("GROQ_API_KEY is not set"), "{e}");
        let set = BTreeMap::from([("groq".to_string(), ())]);
        assert!(c.check_platform_keys(&set).is_ok());
        assert!(Catalog::builtin().check_platform_keys(&none).is_ok());
    }

    #[test]
    fn the_documented_example_is_a_valid_file() {
        let c = merged(include_str!("../../docs/freeway.example.toml")).unwrap();
        assert_eq!(c.pools().count(), 3);
        assert_eq!(c.providers().count(), 4);
        assert_eq!(
            c.pools.get("openrouter-free").and_then(|p| p.rpd),
            Some(1000)
        );
        assert_eq!(c.tier("pro").map(|t| t.weight), Some(4));
        assert!(
            c.price("deepinfra", "meta-llama/Llama-3.3-70B-Instruct")
                .is_some()
        );
    }

    #[test]
    fn durations_read_as_seconds() {
        assert_eq!(parse_every("7d"), Ok(Some(604_800)));
        assert_eq!(parse_every("90s"), Ok(Some(90)));
        assert_eq!(parse_every("off"), Ok(None));
        for bad in ["", "d", "0h", "5w", "-1d", "99999999999999999999d"] {
            assert!(parse_every(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_duration_is_at_most_a_year() {
        assert_eq!(parse_every("365d"), Ok(Some(MAX_DURATION_S)));
        assert_eq!(parse_every("8760h"), Ok(Some(MAX_DURATION_S)));
        for long in [
            "366d",
            "31536001s",
            "99999999999999d",
            "99999999999999999999d",
        ] {
            let e = parse_every(long).unwrap_err();
            assert!(e.contains("longer than 365d"), "{long:?}: {e}");
        }
        let e =
            merged("[pools.openrouter-free]\ncanary_every = \"99999999999999d\"\n").unwrap_err();
        assert!(
            e.starts_with("pools.openrouter-free.canary_every: ") && !e.contains('\n'),
            "{e}"
        );
    }
}
