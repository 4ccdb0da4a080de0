//! Quota counters: the shared OpenRouter free-model account and Groq's per-model limits.
//!
//! OpenRouter: every `:free` model (and `openrouter/free`) on one key shares one fixed window of
//! `window_s` and one UTC-day counter (docs/providers.md §3.1). A refused request still counts, as
//! observed on the real `/key` endpoint (`used` > `limit`, docs/providers.md §3.1). Paid models
//! are not counted.
//! Groq: requests and tokens per (key, model) per window, refused requests not counted (the
//! captured message reports `Used` equal to `Limit`, docs/providers.md §4.2).
//! Gemini: requests per (key, model) per minute and per Pacific day, refused requests not
//! counted (docs/providers.md §5).

use std::collections::HashMap;

use crate::clock::{DAY_MS, next_midnight, pacific_day, window_start};
use crate::config::SimConfig;

/// Tokens-per-minute limit reported by Groq mode; token use is reported, never enforced.
pub(crate) const GROQ_TPM: u64 = 12_000;

/// Whether a model spends the shared free quota.
pub(crate) fn is_free_model(model: &str) -> bool {
    model.ends_with(":free") || model == "openrouter/free"
}

/// Why the free-model account refused a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    PerMinute {
        limit: u32,
        reset_ms: u64,
    },
    PerDay {
        limit: u32,
        reset_ms: u64,
        high_balance: bool,
    },
}

/// The Groq limiter's view of one request, enough to write all six headers.
#[derive(Clone, Copy, Debug)]
pub(crate) struct GroqVerdict {
    pub refused: bool,
    pub limit_requests: u32,
    /// Requests counted in the window, this one included when admitted.
    pub used_requests: u32,
    pub remaining_tokens: u64,
    /// Milliseconds until the window ends.
    pub reset_in_ms: u64,
    /// Refused because the (key, model) day is spent: the limit, and the ms until it refills.
    pub day_spent: Option<(u32, u64)>,
}

impl GroqVerdict {
    pub(crate) fn remaining_requests(&self) -> u32 {
        self.limit_requests.saturating_sub(self.used_requests)
    }
}

#[derive(Debug, Default)]
struct FreeCounters {
    window_start_ms: u64,
    in_window: u32,
    day_start_ms: u64,
    in_day: u32,
}

#[derive(Debug, Default)]
struct GroqCounters {
    window_start_ms: u64,
    requests: u32,
    tokens: u64,
    day_start_ms: u64,
    in_day: u32,
}

/// Why Gemini refused a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct GeminiRefusal {
    /// The day's quota is spent (else the minute's).
    pub per_day: bool,
    pub limit: u32,
    /// What Gemini's `RetryInfo` says: the seconds to the minute's end, even when the day is
    /// spent (the real service understates a spent day's wait the same way).
    pub retry_in_ms: u64,
}

#[derive(Debug, Default)]
struct GeminiCounters {
    minute_start_ms: u64,
    in_minute: u32,
    day: i64,
    in_day: u32,
}

#[derive(Debug, Default)]
pub(crate) struct Accounts {
    free: HashMap<String, FreeCounters>,
    // Keyed by API key, then model.
    groq: HashMap<String, HashMap<String, GroqCounters>>,
    gemini: HashMap<String, HashMap<String, GeminiCounters>>,
}

impl Accounts {
    pub(crate) fn clear(&mut self) {
        self.free.clear();
        self.groq.clear();
        self.gemini.clear();
    }

    /// Counts one Gemini request unless the (key, model) minute or Pacific day is full.
    pub(crate) fn count_gemini(
        &mut self,
        key: &str,
        model: &str,
        now_ms: u64,
        cfg: &SimConfig,
    ) -> Option<GeminiRefusal> {
        let c = entry(entry(&mut self.gemini, key), model);
        let minute = window_start(now_ms, 60_000);
        if c.minute_start_ms != minute {
            c.minute_start_ms = minute;
            c.in_minute = 0;
        }
        let (day, _) = pacific_day(now_ms);
        if c.day != day {
            c.day = day;
            c.in_day = 0;
        }
        let retry_in_ms = minute + 60_000 - now_ms;
        if c.in_day >= cfg.gemini_rpd {
            return Some(GeminiRefusal {
                per_day: true,
                limit: cfg.gemini_rpd,
                retry_in_ms,
            });
        }
        if c.in_minute >= cfg.gemini_rpm {
            return Some(GeminiRefusal {
                per_day: false,
                limit: cfg.gemini_rpm,
                retry_in_ms,
            });
        }
        c.in_minute += 1;
        c.in_day += 1;
        None
    }

    /// Counts one free-model request and says whether the account refuses it.
    /// The daily limit wins over the per-minute one: it is the longer wait.
    pub(crate) fn count_free(
        &mut self,
        key: &str,
        now_ms: u64,
        cfg: &SimConfig,
    ) -> Option<Refusal> {
        let c = entry(&mut self.free, key);
        let window_ms = cfg.window_s * 1000;
        let win = window_start(now_ms, window_ms);
        if c.window_start_ms != win {
            c.window_start_ms = win;
            c.in_window = 0;
        }
        let day = window_start(now_ms, DAY_MS);
        if c.day_start_ms != day {
            c.day_start_ms = day;
            c.in_day = 0;
        }
        c.in_window = c.in_window.saturating_add(1);
        c.in_day = c.in_day.saturating_add(1);

        let daily = cfg.free_daily_limit();
        if c.in_day > daily {
            Some(Refusal::PerDay {
                limit: daily,
                reset_ms: next_midnight(now_ms),
                high_balance: cfg.high_balance,
            })
        } else if c.in_window > cfg.rpm {
            Some(Refusal::PerMinute {
                limit: cfg.rpm,
                reset_ms: win + window_ms,
            })
        } else {
            None
        }
    }

    /// Free-model requests counted today for `key`, refused ones included.
    pub(crate) fn free_used_today(&self, key: &str, now_ms: u64) -> u32 {
        match self.free.get(key) {
            Some(c) if c.day_start_ms == window_start(now_ms, DAY_MS) => c.in_day,
            _ => 0,
        }
    }

    /// Counts one Groq request of `tokens` tokens unless the (key, model) window of `rpm`
    /// requests is full.
    pub(crate) fn count_groq(
        &mut self,
        key: &str,
        model: &str,
        tokens: u64,
        now_ms: u64,
        cfg: &SimConfig,
        rpm: u32,
    ) -> GroqVerdict {
        let per_key = entry(&mut self.groq, key);
        let c = entry(per_key, model);
        let window_ms = cfg.window_s * 1000;
        let win = window_start(now_ms, window_ms);
        if c.window_start_ms != win {
            c.window_start_ms = win;
            c.requests = 0;
            c.tokens = 0;
        }
        let day = window_start(now_ms, DAY_MS);
        if c.day_start_ms != day {
            c.day_start_ms = day;
            c.in_day = 0;
        }
        let day_spent =
            (c.in_day >= cfg.groq_rpd).then(|| (cfg.groq_rpd, next_midnight(now_ms) - now_ms));
        let refused = day_spent.is_some() || c.requests >= rpm;
        if !refused {
            c.requests += 1;
            c.in_day += 1;
            c.tokens = c.tokens.saturating_add(tokens);
        }
        GroqVerdict {
            refused,
            limit_requests: rpm,
            used_requests: c.requests,
            remaining_tokens: GROQ_TPM.saturating_sub(c.tokens),
            reset_in_ms: win + window_ms - now_ms,
            day_spent,
        }
    }
}

fn entry<'m, V: Default>(map: &'m mut HashMap<String, V>, key: &str) -> &'m mut V {
    map.entry(key.to_owned()).or_default()
}
