//! The shared free-model account: per-minute window, UTC day, exact 429 wire shapes.

use crate::common;

use common::*;
use serde_json::{Value, json};
use sim::{Shape, SimConfig};

/// Sends `n` free requests that must all succeed, alternating two `:free` models to show they
/// share one account.
async fn spend(client: &reqwest::Client, sim: &sim::SimHandle, key: &str, n: usize) {
    for i in 0..n {
        let model = if i % 2 == 0 { FREE } else { FREE_2 };
        let (status, headers, text) = chat(client, sim, key, &body(model, "hi", false)).await;
        assert_eq!(status, 200, "request {} refused: {text}", i + 1);
        assert!(
            header(&headers, "x-ratelimit-limit").is_none(),
            "successful responses carry no X-RateLimit-*"
        );
    }
}

async fn per_minute_429(shape: Shape) -> (Value, reqwest::header::HeaderMap, String, u64) {
    let sim = start(SimConfig {
        shape,
        ..SimConfig::default()
    })
    .await;
    let now = fresh_day(&sim);
    let client = client();
    spend(&client, &sim, KEY, 20).await;
    let (status, headers, text) = chat(&client, &sim, KEY, &body(FREE_2, "hi", false)).await;
    assert_eq!(status, 429);
    sim.shutdown().await;
    (parse(&text), headers, text, now)
}

fn assert_minute_headers(headers: &reqwest::header::HeaderMap, now: u64) -> u64 {
    assert_eq!(header(headers, "x-ratelimit-limit"), Some("20"));
    assert_eq!(header(headers, "x-ratelimit-remaining"), Some("0"));
    assert_eq!(header(headers, "content-type"), Some("application/json"));
    assert!(
        header(headers, "retry-after").is_none(),
        "no Retry-After on free-tier 429s"
    );
    let reset: u64 = header(headers, "x-ratelimit-reset")
        .and_then(|r| r.parse().ok())
        .expect("numeric reset");
    assert_eq!(reset % 60_000, 0, "reset is a whole minute in epoch ms");
    assert!(
        reset > now && reset <= now + 60_000,
        "reset {reset} is the end of the window at {now}"
    );
    reset
}

#[tokio::test]
async fn the_21st_free_request_gets_the_2026_per_minute_429() {
    let (v, headers, text, now) = per_minute_429(Shape::Y2026).await;
    let reset = assert_minute_headers(&headers, now);
    let user_id = v["user_id"].as_str().expect("user_id").to_owned();
    assert!(
        user_id.starts_with("user_") && user_id.len() == 32,
        "{user_id}"
    );
    assert_eq!(
        v,
        json!({
            "error": {
                "message": "Rate limit exceeded: free-models-per-min. ",
                "code": 429,
                "metadata": {
                    "headers": {
                        "X-RateLimit-Limit": "20",
                        "X-RateLimit-Remaining": "0",
                        "X-RateLimit-Reset": reset.to_string()
                    },
                    "provider_name": null,
                    "limit_source": "openrouter_free_tier_per_minute",
                    "remedy_hint": "Slow down requests to free models, or retry after the per-minute window resets."
                }
            },
            "user_id": user_id
        })
    );
    // The trailing space is on the wire, not an artefact of parsing.
    assert!(text.contains(r#""message":"Rate limit exceeded: free-models-per-min. ""#));
}

#[tokio::test]
async fn the_21st_free_request_gets_the_2025_per_minute_429() {
    let (v, headers, text, now) = per_minute_429(Shape::Y2025).await;
    let reset = assert_minute_headers(&headers, now);
    assert_eq!(
        v["error"],
        json!({
            "message": "Rate limit exceeded: free-models-per-min.",
            "code": 429,
            "metadata": {
                "headers": {
                    "X-RateLimit-Limit": "20",
                    "X-RateLimit-Remaining": "0",
                    "X-RateLimit-Reset": reset.to_string()
                },
                "provider_name": null
            }
        })
    );
    assert!(
        v["user_id"]
            .as_str()
            .is_some_and(|u| u.starts_with("user_"))
    );
    assert!(!text.contains("limit_source") && !text.contains("remedy_hint"));
}

#[tokio::test]
async fn the_window_reopens_once_the_clock_passes_reset() {
    let sim = start(SimConfig::default()).await;
    fresh_day(&sim);
    let client = client();
    spend(&client, &sim, KEY, 20).await;
    let (status, headers, _) = chat(&client, &sim, KEY, &body(FREE, "hi", false)).await;
    assert_eq!(status, 429);
    let reset: u64 = header(&headers, "x-ratelimit-reset")
        .and_then(|r| r.parse().ok())
        .expect("reset");

    let now = sim.advance_clock(0);
    sim.advance_clock(reset - now);
    let (status, _, text) = chat(&client, &sim, KEY, &body(FREE, "hi", false)).await;
    assert_eq!(status, 200, "{text}");
    sim.shutdown().await;
}

#[tokio::test]
async fn the_daily_limit_resets_at_utc_midnight_and_refusals_count() {
    let sim = start(SimConfig {
        rpm: 1_000,
        rpd: 5,
        ..SimConfig::default()
    })
    .await;
    let now = fresh_day(&sim);
    let client = client();
    spend(&client, &sim, KEY, 5).await;

    for _ in 0..3 {
        let (status, headers, text) = chat(&client, &sim, KEY, &body(FREE, "hi", false)).await;
        assert_eq!(status, 429);
        let midnight = now - now % DAY_MS + DAY_MS;
        assert_eq!(header(&headers, "x-ratelimit-limit"), Some("5"));
        assert_eq!(header(&headers, "x-ratelimit-remaining"), Some("0"));
        assert_eq!(
            header(&headers, "x-ratelimit-reset"),
            Some(midnight.to_string().as_str())
        );
        let v = parse(&text);
        assert_eq!(
            v["error"],
            json!({
                "message": "Rate limit exceeded: free-models-per-day. Add 10 credits to unlock 1000 free model requests per day",
                "code": 429,
                "metadata": {
                    "headers": {
                        "X-RateLimit-Limit": "5",
                        "X-RateLimit-Remaining": "0",
                        "X-RateLimit-Reset": midnight.to_string()
                    },
                    "provider_name": null,
                    "limit_source": "openrouter_free_tier_daily",
                    "remedy_hint": "Wait for the daily reset (see X-RateLimit-Reset), or purchase credits to raise your free-model daily limit."
                }
            })
        );
    }

    let info = key_info(&client, &sim, KEY).await;
    assert_eq!(
        info["data"]["free_model_daily_requests"],
        json!({"limit": 5, "remaining": 0, "used": 8}),
        "refused requests count, so used exceeds limit"
    );
    assert_eq!(info["data"]["is_free_tier"], json!(true));

    let now = sim.advance_clock(0);
    sim.advance_clock(DAY_MS - now % DAY_MS);
    let (status, _, _) = chat(&client, &sim, KEY, &body(FREE, "hi", false)).await;
    assert_eq!(status, 200, "a new UTC day starts a new count");
    let info = key_info(&client, &sim, KEY).await;
    assert_eq!(
        info["data"]["free_model_daily_requests"],
        json!({"limit": 5, "remaining": 4, "used": 1})
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn a_high_balance_account_gets_1000_a_day_and_the_high_balance_429() {
    let sim = start(SimConfig {
        rpm: 5_000,
        rpd: 3,
        high_balance: true,
        ..SimConfig::default()
    })
    .await;
    let now = fresh_day(&sim);
    let client = client();
    spend(&client, &sim, KEY, 1000).await;
    let (status, headers, text) = chat(&client, &sim, KEY, &body(FREE, "hi", false)).await;
    assert_eq!(status, 429);
    let midnight = (now - now % DAY_MS + DAY_MS).to_string();
    assert_eq!(header(&headers, "x-ratelimit-limit"), Some("1000"));
    assert_eq!(
        header(&headers, "x-ratelimit-reset"),
        Some(midnight.as_str())
    );
    let v = parse(&text);
    assert_eq!(
        v["error"]["message"],
        json!("Rate limit exceeded: free-models-per-day-high-balance. ")
    );
    assert_eq!(
        v["error"]["metadata"]["limit_source"],
        json!("openrouter_free_tier_daily")
    );
    assert_eq!(
        v["error"]["metadata"]["remedy_hint"],
        json!("Wait for the daily reset (see X-RateLimit-Reset)")
    );
    let info = key_info(&client, &sim, KEY).await;
    assert_eq!(info["data"]["is_free_tier"], json!(false));
    assert_eq!(
        info["data"]["free_model_daily_requests"],
        json!({"limit": 1000, "remaining": 0, "used": 1001})
    );
    let variants: Vec<String> = sim.calls().into_iter().map(|c| c.variant).collect();
    assert_eq!(
        variants.last().map(String::as_str),
        Some("free_per_day_high_balance")
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn paid_models_are_not_counted_and_each_key_is_its_own_account() {
    let sim = start(SimConfig {
        rpm: 2,
        ..SimConfig::default()
    })
    .await;
    fresh_day(&sim);
    let client = client();
    spend(&client, &sim, KEY, 2).await;
    let (status, _, _) = chat(&client, &sim, KEY, &body("openrouter/free", "hi", false)).await;
    assert_eq!(status, 429, "openrouter/free shares the free account");

    for _ in 0..5 {
        let (status, _, text) = chat(&client, &sim, KEY, &body(PAID, "hi", false)).await;
        assert_eq!(status, 200, "paid model refused: {text}");
    }
    spend(&client, &sim, OTHER_KEY, 2).await;

    let a = key_info(&client, &sim, KEY).await;
    let b = key_info(&client, &sim, OTHER_KEY).await;
    assert_eq!(a["data"]["free_model_daily_requests"]["used"], json!(3));
    assert_eq!(b["data"]["free_model_daily_requests"]["used"], json!(2));
    sim.shutdown().await;
}

#[tokio::test]
async fn the_key_endpoint_has_the_documented_shape_and_masks_the_key() {
    let sim = start(SimConfig::default()).await;
    fresh_day(&sim);
    let client = client();
    spend(&client, &sim, KEY, 3).await;
    for path in ["key", "auth/key"] {
        let res = client
            .get(format!("{}/{path}", sim.base_url()))
            .bearer_auth(KEY)
            .send()
            .await
            .expect("key request");
        assert_eq!(res.status().as_u16(), 200);
        let text = res.text().await.expect("body");
        assert!(!text.contains(KEY), "the label never reveals the whole key");
        let v = parse(&text);
        let d = &v["data"];
        assert_eq!(d["label"], json!("sk-or-v1-0e6...1c96"));
        assert_eq!(
            d["free_model_daily_requests"],
            json!({"limit": 50, "remaining": 47, "used": 3})
        );
        assert_eq!(
            d["rate_limit"],
            json!({"requests": -1, "interval": "10s", "note": "This field is deprecated and safe to ignore."})
        );
        assert_eq!(d["is_free_tier"], json!(true));
        assert_eq!(d["limit"], Value::Null);
        assert_eq!(d["limit_reset"], Value::Null);
    }

    let res = client
        .get(format!("{}/key", sim.base_url()))
        .send()
        .await
        .expect("key request");
    assert_eq!(res.status().as_u16(), 401);
    assert_eq!(
        parse(&res.text().await.expect("body")),
        json!({"error": {"code": 401, "message": "Missing Authentication header"}})
    );
    sim.shutdown().await;
}
