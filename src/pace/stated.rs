//! What a provider states about its quota in an answer's headers, read by its dialect
//! (docs/design.md §4.4, "The provider's word wins").
//!
//! The same header names mean different things per provider: OpenRouter's `X-RateLimit-*`
//! describe the account's window or its day (the reset says which), Groq's
//! `x-ratelimit-*-requests` describe the *day* and its `-tokens` the minute, OpenAI's
//! `-requests` the minute. A limiter that read one as the other would pace a day's limit per
//! minute. Every value is the provider's and so hostile until checked: a number that does not
//! parse, is negative, zero (for a limit) or absurd (over [`MAX_STATED`]), or a reset that is past
//! or more than two days away, is ignored with a debug log. Nothing read here can lower a limit to
//! zero.

pub use crate::classify::MAX_STATED;
use crate::classify::RefusalLimits;
use crate::dialect::Dialect;
use crate::headers::Headers;

/// A minute: the window a limit stated "per minute" is a limit of.
const MINUTE_MS: u64 = 60_000;

/// The furthest a stated reset may be: a day and a margin for zones and clocks.
const MAX_RESET_MS: u64 = 48 * 3_600_000;

/// `X-RateLimit-Reset` values below this (2001-09-09 in ms) are not epoch milliseconds.
const MIN_EPOCH_MS: u64 = 1_000_000_000_000;

/// What kind of answer the headers came with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// A call the provider served.
    Served,
    /// A refusal for the pool's window (its per-minute quota); the retry hint, when it had one,
    /// says when that window ends.
    WindowRefusal { hint_ms: Option<u64> },
    /// A refusal for the pool's day.
    DayRefusal,
}

/// Where a limit a pool learned came from (docs/design.md §4.4), as `GET /v1/pools` shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum LimitSource {
    /// The provider's rate-limit headers.
    Headers,
    /// A refusal's body ("Limit 30", a `quotaValue`).
    Refusal,
    /// The provider's quota endpoint.
    QuotaEndpoint,
    /// Counted: the calls made before a refusal that stated no limit.
    Counted,
}

impl LimitSource {
    /// The number the limiter's hash keeps it as.
    pub(crate) fn code(self) -> u64 {
        match self {
            LimitSource::Headers => 1,
            LimitSource::Refusal => 2,
            LimitSource::QuotaEndpoint => 3,
            LimitSource::Counted => 4,
        }
    }

    /// The source kept as `code`; `None` for 0 or an unknown number.
    pub(crate) fn from_code(code: u64) -> Option<LimitSource> {
        Some(match code {
            1 => LimitSource::Headers,
            2 => LimitSource::Refusal,
            3 => LimitSource::QuotaEndpoint,
            4 => LimitSource::Counted,
            _ => return None,
        })
    }
}

/// Which limits of a [`Stated`] a refusal's body stated rather than a header.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct InBody {
    pub per_window: bool,
    pub per_day: bool,
    pub tokens_per_window: bool,
}

/// What one answer stated about the pool its route spends. `None`: not stated (or not
/// believable).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stated {
    pub per_window: Option<u32>,
    pub per_day: Option<u32>,
    pub tokens_per_window: Option<u32>,
    /// Requests left in the current window.
    pub window_remaining: Option<u32>,
    /// Requests left today.
    pub day_remaining: Option<u32>,
    /// Tokens left in the current window.
    pub tokens_remaining: Option<u32>,
    /// Ms from now until the provider's current window ends.
    pub window_ends_in_ms: Option<u64>,
    /// The provider refused for the day: the day is spent, whatever was counted.
    pub day_spent: bool,
    /// The provider said where its window ends as a moment (an epoch-ms reset), as fixed and
    /// sliding windows do; how those moments move tells which (docs/design.md §4.4, *Kind*). A
    /// duration or a retry hint says no such thing (a rolling bucket has them too).
    pub ends_at_moment: bool,
    /// Which of the limits the refusal's body stated ([`Stated::with_refusal`]).
    pub in_body: InBody,
}

impl Stated {
    /// Read `headers` (real ones and any body echo) of `answer` on a route of `dialect` whose
    /// pool's window is `window_ms` long, at `now_ms`.
    pub fn read(
        dialect: Dialect,
        headers: &Headers,
        answer: Answer,
        window_ms: u64,
        now_ms: u64,
    ) -> Stated {
        let mut stated = match dialect {
            Dialect::Openrouter => account_headers(headers, answer, window_ms, now_ms),
            Dialect::Groq => Stated {
                per_day: limit(headers, "x-ratelimit-limit-requests"),
                day_remaining: count(headers, "x-ratelimit-remaining-requests"),
                tokens_per_window: limit(headers, "x-ratelimit-limit-tokens"),
                tokens_remaining: count(headers, "x-ratelimit-remaining-tokens"),
                ..Stated::default()
            },
            Dialect::Openai | Dialect::Mistral | Dialect::Cerebras | Dialect::Generic => Stated {
                per_window: limit(headers, "x-ratelimit-limit-requests"),
                window_remaining: count(headers, "x-ratelimit-remaining-requests"),
                window_ends_in_ms: duration(headers, "x-ratelimit-reset-requests", window_ms),
                tokens_per_window: limit(headers, "x-ratelimit-limit-tokens"),
                tokens_remaining: count(headers, "x-ratelimit-remaining-tokens"),
                ..Stated::default()
            },
            Dialect::Gemini => Stated::default(),
        };
        match answer {
            Answer::DayRefusal => stated.day_spent = true,
            Answer::WindowRefusal { hint_ms } => {
                // A window refusal's retry hint is where the window ends, when nothing said it.
                let hinted = hint_ms.filter(|&ms| ms > 0 && ms <= window_ms);
                stated.window_ends_in_ms = stated.window_ends_in_ms.or(hinted);
                stated.window_remaining = Some(0);
            }
            Answer::Served => {}
        }
        // A remaining above its own limit is not believed.
        if let (Some(r), Some(l)) = (stated.window_remaining, stated.per_window)
            && r > l
        {
            stated.window_remaining = None;
        }
        stated
    }

    /// Add what a refusal's body states (docs/design.md §4.4, limits stated in a refusal): its
    /// minute's limits for a pool whose window is a minute, its day's for any pool; where the
    /// headers stated a dimension too, they win.
    pub fn with_refusal(mut self, body: &RefusalLimits, window_ms: u64) -> Stated {
        let fill = |header: &mut Option<u32>, body: Option<u32>| match header {
            Some(_) => false,
            None => {
                *header = body;
                body.is_some()
            }
        };
        if window_ms == MINUTE_MS {
            self.in_body.per_window = fill(&mut self.per_window, body.requests_per_minute);
            self.in_body.tokens_per_window =
                fill(&mut self.tokens_per_window, body.tokens_per_minute);
        }
        self.in_body.per_day = fill(&mut self.per_day, body.requests_per_day);
        self
    }

    /// Whether the answer stated nothing the limiter can use.
    pub fn is_empty(&self) -> bool {
        *self == Stated::default()
    }
}

/// OpenRouter's `X-RateLimit-Limit`/`-Remaining`/`-Reset` (epoch ms): the account's window or
/// its day, as the refusal or the reset's distance says.
fn account_headers(headers: &Headers, answer: Answer, window_ms: u64, now_ms: u64) -> Stated {
    let limit = limit(headers, "x-ratelimit-limit");
    let remaining = count(headers, "x-ratelimit-remaining");
    let reset_in = epoch(headers, "x-ratelimit-reset", now_ms);
    let is_day = match answer {
        Answer::DayRefusal => true,
        Answer::WindowRefusal { .. } => false,
        // A served call's headers are the window's when they reset within it.
        Answer::Served => match reset_in {
            Some(ms) => ms > window_ms + super::WINDOW_GUARD_MS,
            None => return Stated::default(),
        },
    };
    if is_day {
        Stated {
            per_day: limit,
            day_remaining: remaining,
            ..Stated::default()
        }
    } else {
        let ends = reset_in.filter(|&ms| ms <= window_ms + super::WINDOW_GUARD_MS);
        Stated {
            per_window: limit,
            window_remaining: remaining,
            window_ends_in_ms: ends,
            ends_at_moment: ends.is_some(),
            ..Stated::default()
        }
    }
}

/// A header's whole number, if it is one no larger than [`MAX_STATED`].
fn count(headers: &Headers, name: &str) -> Option<u32> {
    let text = headers.get(name)?;
    match text.trim().parse::<u64>() {
        Ok(n) if n <= MAX_STATED => u32::try_from(n).ok(),
        _ => {
            tracing::debug!(header = name, value = %text.escape_debug(), "ignoring a rate-limit header that is no believable count");
            None
        }
    }
}

/// A header's limit: a count of at least 1 (a limit of 0 would close the pool for ever).
fn limit(headers: &Headers, name: &str) -> Option<u32> {
    count(headers, name).filter(|&n| n > 0)
}

/// An epoch-ms header as ms from `now_ms`, if it is a moment ahead within two days.
fn epoch(headers: &Headers, name: &str, now_ms: u64) -> Option<u64> {
    let text = headers.get(name)?;
    let at = text.trim().parse::<u64>().ok();
    // A moment the answer's own trip has just passed (a sliding window's reset is often the
    // moment of the refusal itself) is now, not nothing: within the guard it reads as 1 ms.
    let ahead = at
        .filter(|&at| at >= MIN_EPOCH_MS && at + super::WINDOW_GUARD_MS > now_ms)
        .map(|at| at.saturating_sub(now_ms).max(1))
        .filter(|&ms| ms <= MAX_RESET_MS);
    if ahead.is_none() {
        tracing::debug!(header = name, value = %text.escape_debug(), "ignoring a reset that is no moment ahead");
    }
    ahead
}

/// A duration header (`"2m59.56s"`, `"12ms"`) as ms, if it is no longer than the window.
fn duration(headers: &Headers, name: &str, window_ms: u64) -> Option<u64> {
    let text = headers.get(name)?;
    let ms = crate::classify::duration_ms(text).filter(|&ms| ms > 0 && ms <= window_ms);
    if ms.is_none() {
        tracing::debug!(header = name, value = %text.escape_debug(), "ignoring a reset that is no duration within the window");
    }
    ms
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_800_000_000_000;
    const MINUTE: u64 = 60_000;

    fn headers(pairs: &[(&str, &str)]) -> Headers {
        pairs.iter().map(|(n, v)| (*n, *v)).collect()
    }

    #[test]
    fn openrouter_headers_are_the_window_or_the_day_as_the_reset_says() {
        let reset = (NOW + 8_000).to_string();
        let h = headers(&[
            ("X-RateLimit-Limit", "20"),
            ("X-RateLimit-Remaining", "3"),
            ("X-RateLimit-Reset", &reset),
        ]);
        let served = Stated::read(Dialect::Openrouter, &h, Answer::Served, MINUTE, NOW);
        assert_eq!(
            served,
            Stated {
                per_window: Some(20),
                window_remaining: Some(3),
                window_ends_in_ms: Some(8_000),
                ends_at_moment: true,
                ..Stated::default()
            }
        );
        let midnight = (NOW + 5 * 3_600_000).to_string();
        let day = headers(&[
            ("x-ratelimit-limit", "50"),
            ("x-ratelimit-remaining", "0"),
            ("x-ratelimit-reset", &midnight),
        ]);
        for answer in [Answer::Served, Answer::DayRefusal] {
            let s = Stated::read(Dialect::Openrouter, &day, answer, MINUTE, NOW);
            assert_eq!(
                (s.per_day, s.day_remaining, s.per_window),
                (Some(50), Some(0), None)
            );
        }
        let refused = Stated::read(
            Dialect::Openrouter,
            &h,
            Answer::WindowRefusal { hint_ms: None },
            MINUTE,
            NOW,
        );
        assert_eq!(
            refused.window_remaining,
            Some(0),
            "a refusal leaves nothing"
        );
        // A reset the answer's trip has just passed is the window ending now: the refusal is
        // of the window before, not of the one just begun. One past the guard is no moment.
        for (past_ms, ends) in [
            (0, Some(1)),
            (3, Some(1)),
            (crate::pace::WINDOW_GUARD_MS + 1, None),
        ] {
            let reset = (NOW - past_ms).to_string();
            let h = headers(&[("X-RateLimit-Limit", "20"), ("X-RateLimit-Reset", &reset)]);
            let answer = Answer::WindowRefusal { hint_ms: None };
            let s = Stated::read(Dialect::Openrouter, &h, answer, MINUTE, NOW);
            assert_eq!(s.window_ends_in_ms, ends, "{past_ms} ms past");
        }
    }

    #[test]
    fn groq_requests_are_the_day_and_its_tokens_the_minute() {
        let h = headers(&[
            ("x-ratelimit-limit-requests", "14400"),
            ("x-ratelimit-remaining-requests", "14370"),
            ("x-ratelimit-reset-requests", "2m59.56s"),
            ("x-ratelimit-limit-tokens", "18000"),
            ("x-ratelimit-remaining-tokens", "17997"),
        ]);
        let s = Stated::read(Dialect::Groq, &h, Answer::Served, MINUTE, NOW);
        assert_eq!(
            s,
            Stated {
                per_day: Some(14400),
                day_remaining: Some(14370),
                tokens_per_window: Some(18000),
                tokens_remaining: Some(17997),
                ..Stated::default()
            }
        );
        let openai = Stated::read(Dialect::Openai, &h, Answer::Served, MINUTE, NOW);
        assert_eq!(
            (openai.per_window, openai.per_day),
            (Some(14400), None),
            "OpenAI's -requests are per minute"
        );
        assert_eq!(
            openai.window_ends_in_ms, None,
            "a reset past the window is no phase"
        );
    }

    #[test]
    fn a_window_refusal_hint_is_the_windows_end_when_no_header_says() {
        let s = Stated::read(
            Dialect::Gemini,
            &Headers::new(),
            Answer::WindowRefusal {
                hint_ms: Some(36_000),
            },
            MINUTE,
            NOW,
        );
        assert_eq!(s.window_ends_in_ms, Some(36_000));
        let day = Stated::read(
            Dialect::Gemini,
            &Headers::new(),
            Answer::DayRefusal,
            MINUTE,
            NOW,
        );
        assert!(day.day_spent);
    }

    #[test]
    fn unbelievable_values_are_ignored() {
        for bad in ["-1", "0", "1000000000000", "many", "", "1e9", " 20x"] {
            let h = headers(&[
                ("X-RateLimit-Limit", bad),
                ("X-RateLimit-Reset", bad),
                ("x-ratelimit-limit-requests", bad),
                ("x-ratelimit-reset-requests", bad),
            ]);
            for dialect in [Dialect::Openrouter, Dialect::Openai, Dialect::Groq] {
                let s = Stated::read(
                    dialect,
                    &h,
                    Answer::WindowRefusal { hint_ms: None },
                    MINUTE,
                    NOW,
                );
                assert_eq!(
                    (s.per_window, s.per_day, s.window_ends_in_ms),
                    (None, None, None),
                    "{dialect} {bad:?}"
                );
            }
        }
        let past = headers(&[
            ("X-RateLimit-Limit", "20"),
            ("X-RateLimit-Reset", "1700000000000"),
        ]);
        let s = Stated::read(Dialect::Openrouter, &past, Answer::Served, MINUTE, NOW);
        assert!(
            s.is_empty(),
            "a served answer without a reset ahead says nothing: {s:?}"
        );
    }

    /// Any value of any rate-limit header, in any dialect and answer: no panic, no limit of 0
    /// or past [`MAX_STATED`], no remaining past its limit, no window end past the window.
    mod any_header {
        use super::*;
        use proptest::prelude::*;

        const NAMES: [&str; 10] = [
            "x-ratelimit-limit",
            "x-ratelimit-remaining",
            "x-ratelimit-reset",
            "x-ratelimit-limit-requests",
            "x-ratelimit-remaining-requests",
            "x-ratelimit-reset-requests",
            "x-ratelimit-limit-tokens",
            "x-ratelimit-remaining-tokens",
            "x-ratelimit-reset-tokens",
            "retry-after",
        ];

        fn value() -> impl Strategy<Value = String> {
            prop_oneof![
                any::<i64>().prop_map(|n| n.to_string()),
                any::<u64>().prop_map(|n| n.to_string()),
                (0u64..4_000_000_000_000).prop_map(|n| n.to_string()),
                "[0-9a-z.:+ -]{0,24}",
                ".{0,12}",
            ]
        }

        proptest! {
            #[test]
            fn never_a_zero_or_absurd_limit(
                values in proptest::collection::vec((0..NAMES.len(), value()), 0..12),
                dialect in 0usize..7,
                answer in 0usize..3,
                hint in proptest::option::of(any::<u64>()),
            ) {
                let dialect = [
                    Dialect::Openrouter, Dialect::Openai, Dialect::Groq, Dialect::Mistral,
                    Dialect::Cerebras, Dialect::Gemini, Dialect::Generic,
                ][dialect];
                let answer = [
                    Answer::Served, Answer::WindowRefusal { hint_ms: hint }, Answer::DayRefusal,
                ][answer];
                let headers: Headers = values.iter().map(|(n, v)| (NAMES[*n], v.clone())).collect();
                let s = Stated::read(dialect, &headers, answer, MINUTE, NOW);
                for limit in [s.per_window, s.per_day, s.tokens_per_window].into_iter().flatten() {
                    prop_assert!((1..=MAX_STATED).contains(&u64::from(limit)), "{s:?}");
                }
                if let (Some(left), Some(limit)) = (s.window_remaining, s.per_window) {
                    prop_assert!(left <= limit);
                }
                if let Some(ends) = s.window_ends_in_ms {
                    prop_assert!(ends > 0 && ends <= MINUTE + crate::pace::WINDOW_GUARD_MS);
                }
            }
        }
    }
}
