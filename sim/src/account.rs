//! Quota counters: the shared OpenRouter free-model account and Groq's per-model limits.
//!
//! OpenRouter: every `:free` model (and `openrouter/free`) on one key shares one window of
//! `window_s` and one UTC-day counter (docs/providers.md §3.1). A refused request still counts in
//! the fixed window and the day, as observed on the real `/key` endpoint (`used` > `limit`,
//! docs/providers.md §3.1). The window may also start at a key's first call or slide, to play
//! providers whose windows are not what a client was told. Paid models are not counted.
//! Groq: requests and tokens per (key, model) per window, and a day's bucket of requests that
//! refills gradually (docs/providers.md §4.1); refused requests not counted (the captured message
//! reports `Used` equal to `Limit`, docs/providers.md §4.2).
//! Gemini: requests per (key, model) per minute and per Pacific day, refused requests not
//! counted (docs/providers.md §5).
//! Generic: optionally requests per (key, model) per window, refused requests not counted.

use std::collections::{HashMap, VecDeque};

use crate::clock::{DAY_MS, next_midnight, pacific_day, window_start};
use crate::config::{SimConfig, WindowAlign, WindowKind};

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

/// Where a window stands after a call: what a provider that states its limits says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct WindowState {
    pub limit: u32,
    pub remaining: u32,
    /// Epoch ms of the fixed window's end; in a sliding window, when its oldest call leaves it.
    pub reset_ms: u64,
}

/// The free account's answer to one call.
pub(crate) type FreeVerdict = Result<WindowState, Refusal>;

/// A window's answer to one call: served or refused, and where the window stands.
pub(crate) type WindowVerdict = Result<WindowState, WindowState>;

/// The Groq limiter's view of one request, enough to write all six headers: `-requests`
/// describe the day's bucket (RPD), `-tokens` the minute (TPM), as on the real service
/// (docs/providers.md §4.1); the per-minute request limit refuses but is never stated.
#[derive(Clone, Copy, Debug)]
pub(crate) struct GroqVerdict {
    pub refusal: Option<GroqRefusal>,
    /// Requests per day.
    pub rpd: u32,
    /// Left of the day's bucket, this request taken when admitted.
    pub remaining_requests: u32,
    /// Until the day's bucket is full again.
    pub reset_requests_ms: u64,
    pub remaining_tokens: u64,
    /// Until the window's tokens are back.
    pub reset_tokens_ms: u64,
}

/// Why Groq refused a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum GroqRefusal {
    /// The window's requests are spent: the limit and the requests counted in it.
    PerMinute { limit: u32, used: u32 },
    /// The day's bucket is empty: the ms until it holds a request again.
    PerDay { wait_ms: u64 },
}

#[derive(Debug, Default)]
struct FreeCounters {
    window_start_ms: u64,
    in_window: u32,
    /// Sliding windows: when the calls served in the last `window_s` came, oldest first.
    served: VecDeque<u64>,
    day_start_ms: u64,
    in_day: u32,
}

impl FreeCounters {
    /// Counts a call in the fixed window of `now_ms`, refused or not; returns the window's end
    /// and the calls in it.
    fn count_fixed(&mut self, now_ms: u64, window_ms: u64, align: WindowAlign) -> (u64, u32) {
        let start = match align {
            WindowAlign::Epoch => window_start(now_ms, window_ms),
            // A fresh key's start is 0, so its first call opens a window as any later one does.
            WindowAlign::FirstCall if now_ms >= self.window_start_ms + window_ms => now_ms,
            WindowAlign::FirstCall => self.window_start_ms,
        };
        if self.window_start_ms != start {
            self.window_start_ms = start;
            self.in_window = 0;
        }
        self.in_window = self.in_window.saturating_add(1);
        (start + window_ms, self.in_window)
    }

    /// Forgets the served calls older than the sliding window; returns when the oldest one left
    /// leaves it, if there is one.
    fn slide(&mut self, now_ms: u64, window_ms: u64) -> Option<u64> {
        while self
            .served
            .front()
            .is_some_and(|&t| t + window_ms <= now_ms)
        {
            self.served.pop_front();
        }
        self.served.front().map(|&t| t + window_ms)
    }
}

#[derive(Debug, Default)]
struct GroqCounters {
    window_start_ms: u64,
    requests: u32,
    tokens: u64,
    /// When the day's bucket is full again: it refills one request every day / RPD, as
    /// Groq's does (docs/providers.md §4.1).
    day_full_ms: u64,
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
struct WindowCount {
    window_start_ms: u64,
    requests: u32,
}

#[derive(Debug, Default)]
pub(crate) struct Accounts {
    free: HashMap<String, FreeCounters>,
    // Keyed by API key, then model.
    groq: HashMap<String, HashMap<String, GroqCounters>>,
    gemini: HashMap<String, HashMap<String, GeminiCounters>>,
    generic: HashMap<String, HashMap<String, WindowCount>>,
}

impl Accounts {
    pub(crate) fn clear(&mut self) {
        self.free.clear();
        self.groq.clear();
        self.gemini.clear();
        self.generic.clear();
    }

    /// Counts one request to the generic provider unless its (key, model) window of
    /// `generic_rpm` is full (`Err`, with the window's state); `None` when it has no limit.
    pub(crate) fn count_generic(
        &mut self,
        key: &str,
        model: &str,
        now_ms: u64,
        cfg: &SimConfig,
    ) -> Option<WindowVerdict> {
        let limit = cfg.generic_rpm;
        if limit == 0 {
            return None;
        }
        let c = entry(entry(&mut self.generic, key), model);
        let window_ms = cfg.window_s * 1000;
        let win = window_start(now_ms, window_ms);
        if c.window_start_ms != win {
            (c.window_start_ms, c.requests) = (win, 0);
        }
        let admitted = c.requests < limit;
        if admitted {
            c.requests += 1;
        }
        let state = WindowState {
            limit,
            remaining: limit - c.requests,
            reset_ms: win + window_ms,
        };
        Some(if admitted { Ok(state) } else { Err(state) })
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
    pub(crate) fn count_free(&mut self, key: &str, now_ms: u64, cfg: &SimConfig) -> FreeVerdict {
        let c = entry(&mut self.free, key);
        let window_ms = cfg.window_s * 1000;
        let day = window_start(now_ms, DAY_MS);
        if c.day_start_ms != day {
            c.day_start_ms = day;
            c.in_day = 0;
        }
        c.in_day = c.in_day.saturating_add(1);
        let (reset_ms, in_window) = match cfg.window_kind {
            WindowKind::Fixed => c.count_fixed(now_ms, window_ms, cfg.window_align),
            WindowKind::Sliding => {
                let oldest_leaves = c.slide(now_ms, window_ms);
                let in_window = u32::try_from(c.served.len()).unwrap_or(u32::MAX);
                // The call about to be served leaves last; it is the oldest only when alone.
                (oldest_leaves.unwrap_or(now_ms + window_ms), in_window + 1)
            }
        };

        let daily = cfg.free_daily_limit();
        if c.in_day > daily {
            Err(Refusal::PerDay {
                limit: daily,
                reset_ms: next_midnight(now_ms),
                high_balance: cfg.high_balance,
            })
        } else if in_window > cfg.rpm {
            Err(Refusal::PerMinute {
                limit: cfg.rpm,
                reset_ms,
            })
        } else {
            if cfg.window_kind == WindowKind::Sliding {
                c.served.push_back(now_ms);
            }
            Ok(WindowState {
                limit: cfg.rpm,
                remaining: cfg.rpm - in_window,
                reset_ms,
            })
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
    /// requests is full or its day's bucket is empty.
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
        let rpd = cfg.groq_rpd;
        // A bucket of no requests never refills; a day is as long as anything here waits.
        let refill_ms = DAY_MS.checked_div(u64::from(rpd)).unwrap_or(DAY_MS);
        let full_ms = c.day_full_ms.max(now_ms);
        let spare_ms = DAY_MS.saturating_sub(full_ms - now_ms);
        let left = u32::try_from(spare_ms / refill_ms).map_or(rpd, |n| n.min(rpd));
        let refusal = if left == 0 {
            let wait_ms = match rpd {
                0 => DAY_MS,
                _ => refill_ms - spare_ms,
            };
            Some(GroqRefusal::PerDay { wait_ms })
        } else if c.requests >= rpm {
            Some(GroqRefusal::PerMinute {
                limit: rpm,
                used: c.requests,
            })
        } else {
            None
        };
        if refusal.is_none() {
            c.requests += 1;
            c.tokens = c.tokens.saturating_add(tokens);
            c.day_full_ms = full_ms + refill_ms;
        }
        GroqVerdict {
            refusal,
            rpd,
            remaining_requests: if refusal.is_some() { left } else { left - 1 },
            reset_requests_ms: c.day_full_ms.saturating_sub(now_ms),
            remaining_tokens: GROQ_TPM.saturating_sub(c.tokens),
            reset_tokens_ms: win + window_ms - now_ms,
        }
    }
}

fn entry<'m, V: Default>(map: &'m mut HashMap<String, V>, key: &str) -> &'m mut V {
    map.entry(key.to_owned()).or_default()
}
