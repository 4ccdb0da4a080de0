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

impl Mode {
    /// The provider the unprefixed paths play.
    pub fn provider(self) -> Provider {
        match self {
            Mode::OpenRouter => Provider::OpenRouter,
            Mode::Groq => Provider::Groq,
        }
    }
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

/// The provider a request is addressed to. One simulator plays several at once, each under its
/// own path prefix, so a chain can fail over between free tiers of different shapes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Provider {
    /// `/api/v1`: the shared free-model account.
    OpenRouter,
    /// `/groq/openai/v1`: per (key, model) requests per window, `x-ratelimit-*` on every answer.
    Groq,
    /// `/gemini/v1beta/openai`: per (key, model) requests per minute and per Pacific day.
    Gemini,
    /// `/generic/v1`: a paid OpenAI-compatible provider, without quotas unless `generic_rpm`.
    Generic,
}

impl Provider {
    pub fn name(self) -> &'static str {
        match self {
            Provider::OpenRouter => "openrouter",
            Provider::Groq => "groq",
            Provider::Gemini => "gemini",
            Provider::Generic => "generic",
        }
    }
}

/// Where the free account's fixed window starts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WindowAlign {
    /// At multiples of the window since the epoch, as OpenRouter's minute looks
    /// (docs/providers.md §3.1).
    #[default]
    Epoch,
    /// At a key's first call; the next window starts at the first call after this one ended.
    /// That is the counter most rate limiters build on (a count that expires `window_s` after
    /// the call that created it), and what a client finds when the phase it guessed is wrong.
    FirstCall,
}

/// How the free account counts calls in time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WindowKind {
    /// A window of `window_s` counts every call in it, refused ones included; placed by
    /// [`WindowAlign`].
    #[default]
    Fixed,
    /// At most `rpm` calls served in any interval of `window_s`: no window boundary to burst
    /// across. Refused calls are not counted in it (they still count in the day).
    Sliding,
}

impl FromStr for WindowAlign {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "epoch" => Ok(WindowAlign::Epoch),
            "first-call" => Ok(WindowAlign::FirstCall),
            other => Err(format!(
                "unknown window alignment `{other}` (expected epoch or first-call)"
            )),
        }
    }
}

impl FromStr for WindowKind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "fixed" => Ok(WindowKind::Fixed),
            "sliding" => Ok(WindowKind::Sliding),
            other => Err(format!(
                "unknown window kind `{other}` (expected fixed or sliding)"
            )),
        }
    }
}

/// When an OpenRouter answer's `usage` carries `cost` and `cost_details`.
///
/// OpenRouter's Usage Accounting put them there for a request that asked with
/// `"usage": {"include": true}`; its docs now call that parameter deprecated and say every answer
/// carries them (docs/providers.md §1.4). freeway asks, so the simulator plays the stricter
/// generation by default: a client that forgets to ask gets no cost.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum UsageCost {
    /// Only for a request with `"usage": {"include": true}`.
    #[default]
    Asked,
    /// On every answer, asked or not.
    Always,
}

impl FromStr for UsageCost {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "asked" => Ok(UsageCost::Asked),
            "always" => Ok(UsageCost::Always),
            other => Err(format!(
                "unknown usage cost `{other}` (expected asked or always)"
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
    /// Length of the free account's per-minute window.
    pub window_s: u64,
    /// Where a fixed window starts (sliding windows have no start).
    pub window_align: WindowAlign,
    /// Fixed or sliding window.
    pub window_kind: WindowKind,
    /// OpenRouter: free-model answers carry `X-RateLimit-*` as well, not only the 429s.
    pub state_limits: bool,
    /// Delay before the response headers of every served chat request (time to first byte).
    pub latency_ms: u64,
    /// Streamed chunks per second; 0 sends the whole stream at once.
    pub token_rate: u32,
    /// Error body generation.
    pub shape: Shape,
    /// The account bought ≥ 10 credits: daily limit 1000 and the `-high-balance` message.
    pub high_balance: bool,
    /// Provider imitated on the unprefixed paths (`/v1`, `/openai/v1`).
    pub mode: Mode,
    /// Groq (`/groq/…`): requests per window and per (key, model).
    pub groq_rpm: u32,
    /// Groq: requests per day and per (key, model), refilled one every day / `groq_rpd`.
    pub groq_rpd: u32,
    /// Gemini (`/gemini/…`): requests per minute and per (key, model).
    pub gemini_rpm: u32,
    /// Gemini: requests per day (midnight Pacific) and per (key, model).
    pub gemini_rpd: u32,
    /// Generic (`/generic/v1`): requests per window and per (key, model), stated in OpenAI's
    /// `x-ratelimit-*-requests` headers; 0: no limit and no headers.
    pub generic_rpm: u32,
    /// `: OPENROUTER PROCESSING` comments sent before the first streamed chunk.
    pub keepalive_comments: u32,
    /// When OpenRouter answers show what they cost.
    pub usage_cost: UsageCost,
    /// Capacity of the call log ring buffer; the oldest records are dropped beyond it.
    pub log_cap: usize,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            rpm: 20,
            rpd: 50,
            window_s: 60,
            window_align: WindowAlign::Epoch,
            window_kind: WindowKind::Fixed,
            state_limits: false,
            latency_ms: 0,
            token_rate: 0,
            shape: Shape::Y2026,
            high_balance: false,
            mode: Mode::OpenRouter,
            groq_rpm: 30,
            groq_rpd: 1000,
            gemini_rpm: 10,
            gemini_rpd: 250,
            generic_rpm: 0,
            keepalive_comments: 2,
            usage_cost: UsageCost::Asked,
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
    pub window_align: Option<WindowAlign>,
    pub window_kind: Option<WindowKind>,
    pub state_limits: Option<bool>,
    pub latency_ms: Option<u64>,
    pub token_rate: Option<u32>,
    pub shape: Option<Shape>,
    pub high_balance: Option<bool>,
    pub keepalive_comments: Option<u32>,
    pub usage_cost: Option<UsageCost>,
    pub groq_rpm: Option<u32>,
    pub groq_rpd: Option<u32>,
    pub gemini_rpm: Option<u32>,
    pub gemini_rpd: Option<u32>,
    pub generic_rpm: Option<u32>,
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
        if let Some(v) = self.window_align {
            next.window_align = v;
        }
        if let Some(v) = self.window_kind {
            next.window_kind = v;
        }
        if let Some(v) = self.state_limits {
            next.state_limits = v;
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
        if let Some(v) = self.usage_cost {
            next.usage_cost = v;
        }
        if let Some(v) = self.groq_rpm {
            next.groq_rpm = v;
        }
        if let Some(v) = self.groq_rpd {
            next.groq_rpd = v;
        }
        if let Some(v) = self.gemini_rpm {
            next.gemini_rpm = v;
        }
        if let Some(v) = self.gemini_rpd {
            next.gemini_rpd = v;
        }
        if let Some(v) = self.generic_rpm {
            next.generic_rpm = v;
        }
        next.validate()?;
        Ok(next)
    }
}
