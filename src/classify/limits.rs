//! The limits a refusal states in its body (docs/design.md §4.4, "limits stated in a refusal").
//!
//! Some providers state a limit only when they enforce it: Groq's headers give the day's
//! requests and the minute's tokens, and the minute's requests only in a refusal's message ("on
//! requests per minute (RPM): Limit 30, Used 30"); OpenAI's message says the same in its words
//! ("requests per min (RPM): Limit 3"); Gemini states none in headers, and its `QuotaFailure`
//! names the quota (`quotaId` …`PerMinute`… or …`PerDay`…) and its `quotaValue`. Read here, with
//! the rest of the body, so that a pool learns them like a header's. Every number is the
//! provider's and hostile until checked: zero, negative, absurd (over [`MAX_STATED`]) or not a
//! number is no limit.

use serde_json::Value;

/// The largest limit or count believed: no provider states more than a billion requests or
/// tokens per window; a larger number is a broken header or body, not a limit.
pub const MAX_STATED: u64 = 1_000_000_000;

/// What a refusal states of the limits behind it; `None` where it states nothing believable.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RefusalLimits {
    pub requests_per_minute: Option<u32>,
    pub requests_per_day: Option<u32>,
    pub tokens_per_minute: Option<u32>,
}

impl RefusalLimits {
    /// The limits named in `message` (lowercase): the dimension in its parenthesised short form,
    /// then "limit" and the number, as Groq and OpenAI write them.
    pub(super) fn from_message(message: &str) -> RefusalLimits {
        let after = |dimension: &str| {
            message.match_indices(dimension).find_map(|(at, _)| {
                let tail = message[at + dimension.len()..].trim_start_matches([':', ' ']);
                believable(leading_number(tail.strip_prefix("limit ")?)?)
            })
        };
        RefusalLimits {
            requests_per_minute: after("(rpm)"),
            requests_per_day: after("(rpd)"),
            tokens_per_minute: after("(tpm)"),
        }
    }

    /// The limits Google's `QuotaFailure` violations name: each `quotaId` says the dimension
    /// (requests or tokens, per minute or per day), its `quotaValue` the limit.
    pub(super) fn from_google(details: &[&Value]) -> RefusalLimits {
        let mut limits = RefusalLimits::default();
        let violations = details
            .iter()
            .filter_map(|d| d.get("violations")?.as_array())
            .flatten();
        for violation in violations {
            let Some(id) = violation.get("quotaId").and_then(Value::as_str) else {
                continue;
            };
            let value = match violation.get("quotaValue") {
                Some(Value::String(text)) => leading_number(text.trim()),
                Some(Value::Number(n)) => n.as_u64(),
                _ => None,
            };
            let Some(value) = value.and_then(believable) else {
                continue;
            };
            let slot = match (
                id.contains("Tokens"),
                id.contains("PerMinute"),
                id.contains("PerDay"),
            ) {
                (false, true, false) => &mut limits.requests_per_minute,
                (false, false, true) => &mut limits.requests_per_day,
                (true, true, false) => &mut limits.tokens_per_minute,
                _ => continue,
            };
            slot.get_or_insert(value);
        }
        limits
    }

    /// Each dimension from `self`, else from `other`.
    pub(super) fn or(self, other: RefusalLimits) -> RefusalLimits {
        RefusalLimits {
            requests_per_minute: self.requests_per_minute.or(other.requests_per_minute),
            requests_per_day: self.requests_per_day.or(other.requests_per_day),
            tokens_per_minute: self.tokens_per_minute.or(other.tokens_per_minute),
        }
    }
}

/// The whole number `text` starts with ("30, used 30" → 30), if it has at most 19 digits.
fn leading_number(text: &str) -> Option<u64> {
    let digits = text.bytes().take_while(u8::is_ascii_digit).count();
    text.get(..digits)?.parse().ok()
}

/// A limit of at least 1 and at most [`MAX_STATED`]: a limit of 0 would close a pool for ever.
fn believable(n: u64) -> Option<u32> {
    (1..=MAX_STATED)
        .contains(&n)
        .then(|| u32::try_from(n).ok())
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_dimension_named_before_its_limit_is_read() {
        let groq = "rate limit reached for model `m` on requests per minute (rpm): limit 30, used 30, requested 1.";
        assert_eq!(
            RefusalLimits::from_message(groq).requests_per_minute,
            Some(30)
        );
        let tpm = "on tokens per minute (tpm): limit 6000, used 5900, requested 300.";
        assert_eq!(
            RefusalLimits::from_message(tpm),
            RefusalLimits {
                tokens_per_minute: Some(6000),
                ..RefusalLimits::default()
            }
        );
        for nothing in [
            "on requests per minute (rpm): limit 0, used 0",
            "on requests per minute (rpm): limit -5",
            "on requests per minute (rpm): limit 99999999999999999999999",
            "on requests per minute (rpm): limit 1000000001",
            "(rpm): limit",
            "(rpm)",
            "limit 30 (rpm)",
        ] {
            assert_eq!(
                RefusalLimits::from_message(nothing),
                RefusalLimits::default(),
                "{nothing}"
            );
        }
    }
}
