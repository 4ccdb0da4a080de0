//! Quota endpoints: what a provider says is left of a key's quota, read without spending a call.
//!
//! OpenRouter answers `GET {base}/key` with the key's `free_model_daily_requests`: the limit of
//! free requests this UTC day (50, or 1,000 once credits were bought), how many were used and how
//! many remain (docs/providers.md §3.2). It is how freeway learns that a spent day came back
//! early (credits bought) without probing the closed day with chat calls.

use super::{HttpProvider, Target};
use reqwest::header::{self, HeaderValue};
use serde_json::Value;
use std::time::Duration;

/// How long one read of a quota endpoint may take.
const READ_TIMEOUT: Duration = Duration::from_secs(10);
/// The most of an answer that is read; a key description is well under a kilobyte.
const BODY_CAP: usize = 64 << 10;

/// A key's free requests today, as its provider counts them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DayQuota {
    pub limit: u64,
    pub used: u64,
    pub remaining: u64,
}

/// Why a quota endpoint gave no answer to act on. Never carries the key.
#[derive(Debug, thiserror::Error)]
pub enum QuotaError {
    #[error("cannot reach the quota endpoint: {0}")]
    Transport(String),
    #[error("the quota endpoint answered HTTP {0}")]
    Status(u16),
    #[error("the quota endpoint's answer has no free_model_daily_requests")]
    Unreadable,
}

/// The day's free-request counters of a `/key` answer, or `None` when the body does not hold
/// them (the older shape, a proxy's page, any other bytes). `remaining` is taken as sent, else
/// worked out from `limit` and `used`; refused requests count as used, so `used` may pass `limit`.
pub fn parse_day_quota(body: &[u8]) -> Option<DayQuota> {
    let value: Value = serde_json::from_slice(body).ok()?;
    let counters = value.get("data")?.get("free_model_daily_requests")?;
    let count = |field: &str| counters.get(field).and_then(non_negative);
    let limit = count("limit")?;
    let used = count("used").unwrap_or(0);
    let remaining = count("remaining").unwrap_or_else(|| limit.saturating_sub(used));
    Some(DayQuota {
        limit,
        used,
        remaining,
    })
}

/// A count as a whole number: negative counts are 0, fractions round down, anything else is not
/// a count.
fn non_negative(v: &Value) -> Option<u64> {
    if let Some(n) = v.as_u64() {
        return Some(n);
    }
    let f = v.as_f64()?;
    f.is_finite()
        .then(|| f.max(0.0).min(u64::MAX as f64) as u64)
}

impl HttpProvider {
    /// Read `path` (e.g. `/key`) under the target's base URL with its key.
    pub async fn day_quota(&self, target: &Target, path: &str) -> Result<DayQuota, QuotaError> {
        let url = format!("{}{path}", target.base_url.trim_end_matches('/'));
        let mut auth = HeaderValue::try_from(format!("Bearer {}", target.api_key.expose()))
            .map_err(|_| QuotaError::Transport("the API key is not a valid header value".into()))?;
        auth.set_sensitive(true);
        let read = async {
            let mut response = self
                .client()
                .get(url)
                .header(header::AUTHORIZATION, auth)
                .header(header::ACCEPT, "application/json")
                .send()
                .await
                .map_err(|e| QuotaError::Transport(e.without_url().to_string()))?;
            let status = response.status().as_u16();
            if status != 200 {
                return Err(QuotaError::Status(status));
            }
            let mut body = Vec::new();
            while let Some(chunk) = response
                .chunk()
                .await
                .map_err(|e| QuotaError::Transport(e.without_url().to_string()))?
            {
                if body.len() + chunk.len() > BODY_CAP {
                    return Err(QuotaError::Unreadable);
                }
                body.extend_from_slice(&chunk);
            }
            parse_day_quota(&body).ok_or(QuotaError::Unreadable)
        };
        tokio::time::timeout(READ_TIMEOUT, read)
            .await
            .map_err(|_| QuotaError::Transport("timed out".into()))?
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_documented_answer_reads_as_its_counters() {
        let body = br#"{"data":{"label":"sk-or-v1-0e6...1c96","limit":20,"limit_remaining":8.1,
            "free_model_daily_requests":{"limit":1000,"remaining":990,"used":10}}}"#;
        assert_eq!(
            parse_day_quota(body),
            Some(DayQuota {
                limit: 1000,
                used: 10,
                remaining: 990
            })
        );
    }

    #[test]
    fn counts_past_the_limit_leave_nothing_remaining() {
        // Refused requests count: `used` 1060 against a limit of 1000 was captured.
        let body = br#"{"data":{"free_model_daily_requests":{"limit":1000,"used":1060}}}"#;
        assert_eq!(parse_day_quota(body).map(|q| q.remaining), Some(0));
        let negative =
            br#"{"data":{"free_model_daily_requests":{"limit":50,"remaining":-10,"used":60}}}"#;
        assert_eq!(parse_day_quota(negative).map(|q| q.remaining), Some(0));
    }

    #[test]
    fn answers_without_the_counters_are_not_read_as_a_quota() {
        for body in [
            &br#"{"data":{"label":"x","rate_limit":{"requests":50,"interval":"10s"}}}"#[..],
            br#"{"data":{"free_model_daily_requests":{"limit":"lots"}}}"#,
            br#"{"error":{"code":401,"message":"Missing Authentication header"}}"#,
            b"<html>502 Bad Gateway</html>",
            b"",
        ] {
            assert_eq!(
                parse_day_quota(body),
                None,
                "{}",
                String::from_utf8_lossy(body)
            );
        }
    }

    proptest! {
        #[test]
        fn any_bytes_parse_without_a_panic(body in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = parse_day_quota(&body);
        }

        #[test]
        fn any_counters_parse_without_a_panic(limit in any::<f64>(), used in any::<i64>(), remaining in any::<f64>()) {
            let body = serde_json::json!({"data":{"free_model_daily_requests":
                {"limit": limit, "used": used, "remaining": remaining}}});
            let _ = parse_day_quota(body.to_string().as_bytes());
        }
    }
}
