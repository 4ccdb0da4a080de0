//! `GET /api/v1/key`: the key description clients read their free-model quota from
//! (docs/providers.md §3.2).
//!
//! Its counters must agree with the quota the simulator enforces, so the handler passes them in
//! and this file only lays them out in the documented field order, masking the key as the
//! captured label does.

use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde::Serialize;

use super::{json_response, to_json};

#[derive(Serialize)]
struct KeyInfo {
    data: KeyData,
}

#[derive(Serialize)]
struct KeyData {
    label: String,
    limit: Option<f64>,
    limit_remaining: Option<f64>,
    limit_reset: Option<&'static str>,
    include_byok_in_limit: bool,
    usage: u32,
    usage_daily: u32,
    usage_weekly: u32,
    usage_monthly: u32,
    byok_usage: u32,
    byok_usage_daily: u32,
    byok_usage_weekly: u32,
    byok_usage_monthly: u32,
    is_free_tier: bool,
    is_management_key: bool,
    is_provisioning_key: bool,
    creator_user_id: Option<String>,
    expires_at: Option<String>,
    free_model_daily_requests: FreeModelDailyRequests,
    rate_limit: DeprecatedRateLimit,
}

#[derive(Serialize)]
struct FreeModelDailyRequests {
    limit: u32,
    remaining: u32,
    used: u32,
}

#[derive(Serialize)]
struct DeprecatedRateLimit {
    requests: i32,
    interval: &'static str,
    note: &'static str,
}

/// The key description, consistent with the free-model counters.
pub(crate) fn key_info(key: &str, used: u32, limit: u32, high_balance: bool) -> Response {
    let body = to_json(&KeyInfo {
        data: KeyData {
            label: mask_key(key),
            limit: None,
            limit_remaining: None,
            limit_reset: None,
            include_byok_in_limit: false,
            usage: 0,
            usage_daily: 0,
            usage_weekly: 0,
            usage_monthly: 0,
            byok_usage: 0,
            byok_usage_daily: 0,
            byok_usage_weekly: 0,
            byok_usage_monthly: 0,
            // "Whether the user has paid for credits before" (docs/providers.md §3.2).
            is_free_tier: !high_balance,
            is_management_key: false,
            is_provisioning_key: false,
            creator_user_id: None,
            expires_at: None,
            free_model_daily_requests: FreeModelDailyRequests {
                limit,
                remaining: limit.saturating_sub(used),
                used,
            },
            rate_limit: DeprecatedRateLimit {
                requests: -1,
                interval: "10s",
                note: "This field is deprecated and safe to ignore.",
            },
        },
    });
    json_response(StatusCode::OK, HeaderMap::new(), body)
}

/// `sk-or-v1-0e6...1c96`: the first 12 and last 4 characters, as in the captured label
/// (docs/providers.md §3.2). Shorter keys show a quarter at each end, so the label never reveals
/// the whole key.
fn mask_key(key: &str) -> String {
    let chars: Vec<char> = key.chars().collect();
    let (head, tail) = if chars.len() >= 24 {
        (12, 4)
    } else {
        (chars.len() / 4, chars.len() / 4)
    };
    let head: String = chars[..head].iter().collect();
    let tail: String = chars[chars.len() - tail..].iter().collect();
    format!("{head}...{tail}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_masked_like_the_captured_label() {
        assert_eq!(
            mask_key("sk-or-v1-0e6f44a47a05f1dad2ad7e88c4c4d6b77688915c778b58a5ed4b3f2fb1c96"),
            "sk-or-v1-0e6...1c96"
        );
        assert_eq!(mask_key("abcdefgh"), "ab...gh");
        assert_eq!(mask_key("abc"), "...");
    }
}
