//! Retry hints: every way a provider writes "when to try again" (docs/design.md §3.2,
//! docs/providers.md §5), as ms from now.
//!
//! Mixing the formats up is the easy mistake: OpenRouter's `X-RateLimit-Reset` is epoch
//! milliseconds, `Retry-After` is seconds or an HTTP-date, Groq and OpenAI write Go-style
//! durations (`2m59.56s`, `6ms`) in headers and messages, and Gemini a protobuf duration (`36s`)
//! in a `RetryInfo` detail. Each format is parsed here, once, and the first hint present wins.

use crate::day::parse_http_date_ms;
use crate::headers::Headers;
use serde_json::Value;

/// A retry hint: how long until the provider says to try again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Hint {
    pub ms: u64,
}

/// The first hint present, in the order of docs/design.md §3.2: `Retry-After`, `retry-after-ms`,
/// `metadata.retry_after_seconds`, `RetryInfo.retryDelay`, a duration in the message, then the
/// per-model reset headers (`x-ratelimit-reset-requests` / `-tokens`). OpenRouter's epoch-ms
/// `X-RateLimit-Reset` is a moment, not a wait; the rules read it themselves.
pub(super) fn first(
    headers: &Headers,
    (details, metadata): (Vec<Value>, Option<Value>),
    message: &str,
    now_ms: u64,
) -> Option<Hint> {
    let retry_after = || {
        let v = headers.get("retry-after")?;
        parse_seconds_ms(v).or_else(|| Some(parse_http_date_ms(v)?.saturating_sub(now_ms)))
    };
    let retry_after_ms = || {
        let v = headers.get("retry-after-ms")?.trim().parse::<f64>().ok()?;
        (v.is_finite() && v >= 0.0).then(|| v.ceil() as u64)
    };
    let metadata_seconds = || seconds_ms(metadata.as_ref()?.get("retry_after_seconds")?);
    let retry_info = || {
        details.iter().find_map(|d| {
            let is_retry_info = d
                .get("@type")
                .and_then(Value::as_str)
                .is_some_and(|t| t.ends_with("google.rpc.RetryInfo"));
            is_retry_info
                .then(|| duration_ms(d.get("retryDelay")?.as_str()?))
                .flatten()
        })
    };
    let in_message = || message_duration_ms(message);
    let reset = || {
        ["x-ratelimit-reset-requests", "x-ratelimit-reset-tokens"]
            .iter()
            .filter_map(|name| duration_ms(headers.get(name)?))
            .max()
    };
    retry_after()
        .or_else(retry_after_ms)
        .or_else(metadata_seconds)
        .or_else(retry_info)
        .or_else(in_message)
        .or_else(reset)
        .map(|ms| Hint { ms })
}

/// Delta-seconds (`"17"`, `"1.5"`) as whole ms, rounded up so a hint is never cut short.
pub(super) fn parse_seconds_ms(text: &str) -> Option<u64> {
    seconds_to_ms(text.trim().parse::<f64>().ok()?)
}

/// A JSON number or numeric string of seconds, as ms.
pub(super) fn seconds_ms(value: &Value) -> Option<u64> {
    match value {
        Value::Number(n) => n.as_f64().and_then(seconds_to_ms),
        Value::String(s) => parse_seconds_ms(s),
        _ => None,
    }
}

fn seconds_to_ms(seconds: f64) -> Option<u64> {
    if !seconds.is_finite() || seconds < 0.0 {
        return None;
    }
    let ms = seconds * 1000.0;
    // 16.007 s is 16007.000000000002 ms in binary floating point: that is 16007, not 16008.
    let nearest = ms.round();
    Some(if (ms - nearest).abs() < 1e-6 {
        nearest
    } else {
        ms.ceil()
    } as u64)
}

/// A Go-style or protobuf duration: `2m59.56s`, `1h2m`, `7.66s`, `450ms`, `36s`; whole ms,
/// rounded up. Anything else (a bare number, trailing text) is not a duration.
pub fn duration_ms(text: &str) -> Option<u64> {
    let text = text.trim();
    if text.is_empty() {
        return None;
    }
    let mut total = 0.0_f64;
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let value: f64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let (scale, unit_len) = if rest.starts_with("ms") {
            (1.0, 2)
        } else if rest.starts_with('h') {
            (3_600_000.0, 1)
        } else if rest.starts_with('m') {
            (60_000.0, 1)
        } else if rest.starts_with('s') {
            (1_000.0, 1)
        } else {
            return None;
        };
        total += value * scale;
        rest = &rest[unit_len..];
    }
    (total.is_finite() && total < 1e15).then(|| total.ceil() as u64)
}

/// A wait written in the message, in any common wording: "Please try again in 9m38.016s", "retry
/// in 45.5s", "try again in 399ms", "retry after 20 seconds", "Please retry after 86400
/// seconds", "wait 30s", "try again in 2 minutes". The first lead that a duration follows wins;
/// a lead followed by anything else ("retry after the window resets", "wait a moment") is none.
fn message_duration_ms(message: &str) -> Option<u64> {
    const LEADS: [&str; 5] = [
        "try again in ",
        "try again after ",
        "retry in ",
        "retry after ",
        "wait ",
    ];
    let mut leads: Vec<usize> = LEADS
        .iter()
        .flat_map(|lead| {
            message
                .match_indices(lead)
                // A whole word: "await 5s" is no lead.
                .filter(|(at, _)| {
                    !message[..*at]
                        .chars()
                        .next_back()
                        .is_some_and(char::is_alphabetic)
                })
                .map(|(at, lead)| at + lead.len())
        })
        .collect();
    leads.sort_unstable();
    leads
        .into_iter()
        .find_map(|at| spelled_duration_ms(&message[at..]))
}

/// The duration a text starts with, compact (`9m38.4s`, `399ms`) or in words (`2 minutes`,
/// `5.5 seconds`, `1 hour 30 minutes`): numbers each followed by a unit, whole ms rounded up.
fn spelled_duration_ms(text: &str) -> Option<u64> {
    let mut total = 0.0_f64;
    let mut any = false;
    let mut rest = text;
    loop {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let Ok(value) = rest[..digits].trim_end_matches('.').parse::<f64>() else {
            break;
        };
        let after = rest[digits..].trim_start_matches(' ');
        let unit_len = after
            .find(|c: char| !c.is_ascii_alphabetic())
            .unwrap_or(after.len());
        let Some(scale) = unit_ms(&after[..unit_len]) else {
            break;
        };
        total += value * scale;
        any = true;
        rest = after[unit_len..].trim_start_matches([' ', ',']);
        rest = rest.strip_prefix("and ").unwrap_or(rest);
    }
    (any && total.is_finite() && total < 1e15).then(|| total.ceil() as u64)
}

/// The moment a message says access comes back: "regain access on 2026-04-01 at 00:00 utc"
/// (the message is lowercase already), a date and an optional time of day, in UTC, as epoch
/// ms. Anything else after the lead is none.
pub(super) fn regain_at_ms(message: &str) -> Option<u64> {
    const LEAD: &str = "regain access on ";
    let after = &message[message.find(LEAD)? + LEAD.len()..];
    let date = chrono::NaiveDate::parse_from_str(after.get(..10)?, "%Y-%m-%d").ok()?;
    let time = after[10..]
        .strip_prefix(" at ")
        .and_then(|t| chrono::NaiveTime::parse_from_str(t.get(..5)?, "%H:%M").ok())
        .unwrap_or(chrono::NaiveTime::MIN);
    let ms = date.and_time(time).and_utc().timestamp_millis();
    u64::try_from(ms).ok()
}

/// One unit's length in ms, by any of its common names.
fn unit_ms(unit: &str) -> Option<f64> {
    Some(match unit {
        "ms" | "msec" | "msecs" | "millisecond" | "milliseconds" => 1.0,
        "s" | "sec" | "secs" | "second" | "seconds" => 1_000.0,
        "m" | "min" | "mins" | "minute" | "minutes" => 60_000.0,
        "h" | "hr" | "hrs" | "hour" | "hours" => 3_600_000.0,
        _ => return None,
    })
}

/// When the provider's request allowance refills, from a successful answer's headers (docs/
/// design.md §4.5): `x-ratelimit-reset-requests` (a duration, Groq and OpenAI) or OpenRouter's
/// `X-RateLimit-Reset` (epoch ms), as ms from `now_ms`.
pub fn headroom_reset_ms(headers: &Headers, now_ms: u64) -> Option<u64> {
    if let Some(ms) = headers
        .get("x-ratelimit-reset-requests")
        .and_then(duration_ms)
    {
        return Some(ms);
    }
    let epoch_ms = headers
        .get("x-ratelimit-reset")?
        .trim()
        .parse::<u64>()
        .ok()?;
    // Seconds-valued resets exist too; only an epoch in ms is a moment worth waiting for.
    (epoch_ms > 1_000_000_000_000).then(|| epoch_ms.saturating_sub(now_ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headroom_resets_read_durations_and_epoch_milliseconds_only() {
        let with = |pairs: &[(&str, &str)]| {
            let mut h = Headers::new();
            for (k, v) in pairs {
                h.push(*k, *v);
            }
            headroom_reset_ms(&h, 1_800_000_000_000)
        };
        assert_eq!(
            with(&[("x-ratelimit-reset-requests", "2m59.56s")]),
            Some(179_560)
        );
        assert_eq!(
            with(&[("x-ratelimit-reset", "1800000042000")]),
            Some(42_000)
        );
        assert_eq!(
            with(&[("x-ratelimit-reset", "1700000000000")]),
            Some(0),
            "a past reset"
        );
        assert_eq!(
            with(&[("x-ratelimit-reset", "60")]),
            None,
            "seconds are no moment"
        );
        assert_eq!(with(&[("x-ratelimit-reset-requests", "soon")]), None);
        assert_eq!(with(&[]), None);
    }

    #[test]
    fn seconds_round_up_to_ms() {
        assert_eq!(parse_seconds_ms("17"), Some(17_000));
        assert_eq!(parse_seconds_ms(" 1.0005 "), Some(1_001));
        assert_eq!(parse_seconds_ms("-1"), None);
        assert_eq!(parse_seconds_ms("Wed, 21 Oct 2015 07:28:00 GMT"), None);
        assert_eq!(seconds_ms(&serde_json::json!(16.007)), Some(16_007));
    }

    #[test]
    fn durations_in_every_provider_format() {
        for (text, ms) in [
            ("2m59.56s", 179_560),
            ("7.66s", 7_660),
            ("1h2m3s", 3_723_000),
            ("450ms", 450),
            ("6ms", 6),
            ("36s", 36_000),
            ("0.5s", 500),
            ("8h", 28_800_000),
        ] {
            assert_eq!(duration_ms(text), Some(ms), "{text}");
        }
        for bad in ["", "12", "s", "2x", "1.2.3s", "5 s"] {
            assert_eq!(duration_ms(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_duration_in_a_message_is_found_whatever_its_wording() {
        let cases = [
            (
                "please try again in 9m38.016s. need more tokens?",
                Some(578_016),
            ),
            ("please retry in 45.578569677s.", Some(45_579)),
            ("try again in 6ms", Some(6)),
            ("please try again in 399ms.", Some(399)),
            ("please try again in 9m38.4s.", Some(578_400)),
            (
                "all providers are at capacity. retry after 40 seconds.",
                Some(40_000),
            ),
            (
                "s0 pricing tier. please retry after 86400 seconds. please go here",
                Some(86_400_000),
            ),
            ("please wait 30s before sending more", Some(30_000)),
            ("try again in 2 minutes", Some(120_000)),
            ("retry in 5.5 seconds", Some(5_500)),
            ("try again after 1 hour and 30 minutes.", Some(5_400_000)),
            ("please retry after 1 min, 30 secs", Some(90_000)),
            ("wait 2 sec", Some(2_000)),
            // The first lead a duration follows wins; a lead without one is skipped.
            ("retry after the window resets, or wait 7s", Some(7_000)),
            ("try again in 3s or retry after 60 seconds", Some(3_000)),
            ("please try again later", None),
            ("please wait a moment", None),
            ("retry after 20 requests", None),
            ("await 5s", None),
            ("retry after .", None),
        ];
        for (message, ms) in cases {
            assert_eq!(message_duration_ms(message), ms, "{message}");
        }
    }
}
