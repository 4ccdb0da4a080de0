//! Simulator settings.
//!
//! One definition shared by the command line, the `/_sim/config` control endpoint and in-process
//! tests, so the three cannot drift apart. Validation lives here too: the binary turns a
//! validation error into exit code 2, the control API into a 400.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Which generation of OpenRouter error bodies to emit.
///
/// OpenRouter added `limit_source`, `remedy_hint` and `is_byok` to error metadata during 2026 and
/// changed the per-minute message to end in `". "` (docs/providers.md §2.1, §2.2); clients must
/// cope with both.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Shape {
    #[serde(rename = "2025")]
    Y2025,
    #[default]
    #[serde(rename = "2026")]
    Y2026,
}

impl FromStr for Shape {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "2025" => Ok(Shape::Y2025),
            "2026" => Ok(Shape::Y2026),
            other => Err(format!("unknown shape `{other}` (expected 2025 or 2026)")),
        }
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Shape::Y2025 => "2025",
            Shape::Y2026 => "2026",
        })
    }
}

/// Which provider the simulator imitates.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Shared free-model account, `X-RateLimit-*` on platform 429s only.
    #[default]
    OpenRouter,
    /// Per (key, model) request limit, six `x-ratelimit-*` headers on every response.
    Groq,
}

impl FromStr for Mode {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "openrouter" => Ok(Mode::OpenRouter),
            "groq" => Ok(Mode::Groq),
            other => Err(format!(
                "unknown mode `{other}` (expected openrouter or groq)"
            )),
        }
    }
}

/// Daily free-model limit of an account that bought at least 10 credits (docs/providers.md §3.1).
pub const HIGH_BALANCE_RPD: u32 = 1000;

/// Everything that shapes the simulator's behaviour.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct SimConfig {
    /// Free-model requests per window and per account (OpenRouter), or per (key, model) (Groq).
    pub rpm: u32,
    /// Free-model requests per UTC day and per account, unless `high_balance`.
    pub rpd: u32,
    /// Length of the fixed per-minute window; windows are aligned to multiples of it since the epoch.
    pub window_s: u64,
    /// Delay before the response headers of every served chat request (time to first byte).
    pub latency_ms: u64,
    /// Streamed chunks per second; 0 sends the whole stream at once.
    pub token_rate: u32,
    /// Error body generation.
    pub shape: Shape,
    /// The account bought ≥ 10 credits: daily limit 1000 and the `-high-balance` message.
    pub high_balance: bool,
    /// Provider imitated.
    pub mode: Mode,
    /// `: OPENROUTER PROCESSING` comments sent before the first streamed chunk.
    pub keepalive_comments: u32,
    /// Capacity of the call log ring buffer; the oldest records are dropped beyond it.
    pub log_cap: usize,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            rpm: 20,
            rpd: 50,
            window_s: 60,
            latency_ms: 0,
            token_rate: 0,
            shape: Shape::Y2026,
            high_balance: false,
            mode: Mode::OpenRouter,
            keepalive_comments: 2,
            log_cap: 1_000_000,
        }
    }
}

/// Longest accepted window: a window longer than a day would outlive the daily counter it nests in.
const MAX_WINDOW_S: u64 = 86_400;

impl SimConfig {
    /// Rejects settings the simulator cannot honour.
    pub fn validate(&self) -> Result<(), String> {
        if self.window_s == 0 || self.window_s > MAX_WINDOW_S {
            return Err(format!(
                "window_s must be between 1 and {MAX_WINDOW_S}, got {}",
                self.window_s
            ));
        }
        Ok(())
    }

    /// The daily free-model limit in force.
    pub fn free_daily_limit(&self) -> u32 {
        if self.high_balance {
            HIGH_BALANCE_RPD
        } else {
            self.rpd
        }
    }
}

/// A partial update of the settings that may change while the simulator runs
/// (`POST /_sim/config`; the demo changes quotas live). `mode` and `log_cap` are fixed at start.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigPatch {
    pub rpm: Option<u32>,
    pub rpd: Option<u32>,
    pub window_s: Option<u64>,
    pub latency_ms: Option<u64>,
    pub token_rate: Option<u32>,
    pub shape: Option<Shape>,
    pub high_balance: Option<bool>,
    pub keepalive_comments: Option<u32>,
}

impl ConfigPatch {
    /// Returns the patched settings, or why they are invalid (the original is left untouched).
    pub fn applied_to(&self, base: &SimConfig) -> Result<SimConfig, String> {
        let mut next = *base;
        if let Some(v) = self.rpm {
            next.rpm = v;
        }
        if let Some(v) = self.rpd {
            next.rpd = v;
        }
        if let Some(v) = self.window_s {
            next.window_s = v;
        }
        if let Some(v) = self.latency_ms {
            next.latency_ms = v;
        }
        if let Some(v) = self.token_rate {
            next.token_rate = v;
        }
        if let Some(v) = self.shape {
            next.shape = v;
        }
        if let Some(v) = self.high_balance {
            next.high_balance = v;
        }
        if let Some(v) = self.keepalive_comments {
            next.keepalive_comments = v;
        }
        next.validate()?;
        Ok(next)
    }
}
