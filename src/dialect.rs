//! How a provider speaks about its limits (docs/configuration.md, "Dialects").
//!
//! Providers that all speak the OpenAI wire format still mean different things by the same
//! headers: OpenRouter's `X-RateLimit-*` on a free route describe the whole account's free quota,
//! while Groq's or OpenAI's `x-ratelimit-*` describe one model on one key. Reading one as the
//! other either rests a whole account for one busy model or keeps calling a spent account, so
//! the classifier asks the route's dialect before it trusts a header.

use chrono_tz::Tz;
use serde::{Deserialize, Serialize};

/// A provider's dialect, as `dialect = "…"` names it in the configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Dialect {
    Openrouter,
    Openai,
    Groq,
    Mistral,
    Cerebras,
    Gemini,
    Generic,
}

impl Dialect {
    pub fn as_str(self) -> &'static str {
        match self {
            Dialect::Openrouter => "openrouter",
            Dialect::Openai => "openai",
            Dialect::Groq => "groq",
            Dialect::Mistral => "mistral",
            Dialect::Cerebras => "cerebras",
            Dialect::Gemini => "gemini",
            Dialect::Generic => "generic",
        }
    }

    /// Whether rate-limit headers on a pool's route describe the whole pool (classification
    /// rule 1). Only OpenRouter's do; the others' describe one model on one key.
    pub fn headers_are_pool_wide(self) -> bool {
        self == Dialect::Openrouter
    }

    /// The path under the base URL where the provider tells a key's day quota without spending
    /// a call (docs/providers.md §3.2): OpenRouter's `/key`. The others have none.
    pub fn quota_path(self) -> Option<&'static str> {
        (self == Dialect::Openrouter).then_some("/key")
    }

    /// The provider's day when a pool does not set `day_reset`: OpenRouter counts free requests
    /// per UTC day and Gemini's quotas reset at midnight Pacific; the others' per-day limits
    /// refill continuously, and their retry hint says when.
    pub fn day(self) -> DayClock {
        match self {
            Dialect::Openrouter => DayClock::Fixed(chrono_tz::UTC),
            Dialect::Gemini => DayClock::Fixed(chrono_tz::America::Los_Angeles),
            _ => DayClock::Rolling,
        }
    }
}

/// When a spent day comes back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DayClock {
    /// At midnight in this zone: a day refusal rests until then, whatever shorter hint came
    /// with it.
    Fixed(Tz),
    /// Continuously: a day refusal's retry hint says when.
    Rolling,
}

impl DayClock {
    /// When the day the limiter counts in ends (docs/design.md §4.4): the zone's next midnight;
    /// a rolling day is counted by UTC days.
    pub fn day_end_ms(self, now_ms: u64) -> u64 {
        let zone = match self {
            DayClock::Fixed(zone) => zone,
            DayClock::Rolling => chrono_tz::UTC,
        };
        crate::day::next_midnight_ms(zone, now_ms)
    }
}

impl std::fmt::Display for Dialect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
