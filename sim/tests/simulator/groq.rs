//! Groq mode: six `x-ratelimit-*` headers on every response (`-requests` the day, `-tokens` the
//! minute), per (key, model) RPM and a day that refills gradually, Groq's 429.

use crate::common;

use common::*;
use reqwest::header::HeaderMap;
use serde_json::json;
use sim::{Mode, SimConfig};

const MODEL: &str = "llama-3.3-70b-versatile";

/// A chat request to the unprefixed paths, which play Groq: status, headers, body.
async fn groq_chat(
    client: &reqwest::Client,
    sim: &sim::SimHandle,
    model: &str,
) -> (u16, HeaderMap, String) {
    let url = format!("http://{}/openai/v1/chat/completions", sim.addr);
    let res = post(client, &url, Some(KEY), &body(model, "hi", false)).await;
    let status = res.status().as_u16();
    let headers = res.headers().clone();
    (status, headers, res.text().await.expect("body"))
}

/// A request of Groq's day refills every day / RPD: 86.4 s at the default 1000.
const REFILL_MS: u64 = 86_400;

/// Asserts the six headers of an answer: the day's `remaining` requests, its bucket `owed_ms`
/// from full (less the few ms the test took), the minute's tokens; returns the ms until the
/// minute's end.
fn assert_six_headers(headers: &HeaderMap, remaining: &str, owed_ms: u64) -> u64 {
    assert_eq!(header(headers, "x-ratelimit-limit-requests"), Some("1000"));
    assert_eq!(
        header(headers, "x-ratelimit-remaining-requests"),
        Some(remaining)
    );
    let reset = header(headers, "x-ratelimit-reset-requests").expect("reset-requests");
    let until_full = go_duration_ms(reset);
    assert!(
        until_full <= owed_ms && until_full + 1_000 > owed_ms,
        "{reset} until the day is full, {owed_ms} ms owed"
    );
    assert_eq!(header(headers, "x-ratelimit-limit-tokens"), Some("12000"));
    let tokens: u64 = header(headers, "x-ratelimit-remaining-tokens")
        .and_then(|t| t.parse().ok())
        .expect("tokens");
    assert!(tokens < 12_000);
    let reset = header(headers, "x-ratelimit-reset-tokens").expect("reset-tokens");
    let ms = go_duration_ms(reset);
    assert!(ms > 0 && ms <= 60_000, "{reset}");
    ms
}

#[tokio::test]
async fn groq_mode_sends_six_headers_and_its_own_429() {
    let sim = start(SimConfig {
        mode: Mode::Groq,
        rpm: 2,
        ..SimConfig::default()
    })
    .await;
    fresh_day(&sim);
    let client = client();
    let send = |model| groq_chat(&client, &sim, model);

    let (status, headers, _) = send(MODEL).await;
    assert_eq!(status, 200);
    assert_six_headers(&headers, "999", REFILL_MS);
    assert!(
        header(&headers, "retry-after").is_none(),
        "retry-after only on 429"
    );
    let (status, headers, _) = send(MODEL).await;
    assert_eq!(status, 200);
    assert_six_headers(&headers, "998", 2 * REFILL_MS);

    // The minute's two requests are spent; Groq's headers speak of the day, which is not.
    let (status, headers, text) = send(MODEL).await;
    assert_eq!(status, 429);
    let wait = assert_six_headers(&headers, "998", 2 * REFILL_MS);
    let retry: u64 = header(&headers, "retry-after")
        .and_then(|r| r.parse().ok())
        .expect("retry-after");
    assert_eq!(retry, wait.div_ceil(1000));
    let v = parse(&text);
    assert_eq!(v["error"]["type"], json!("requests"));
    assert_eq!(v["error"]["code"], json!("rate_limit_exceeded"));
    assert!(v["error"].get("param").is_none());
    let message = v["error"]["message"].as_str().expect("message");
    let prefix = format!("Rate limit reached for model `{MODEL}` in organization `org_");
    assert!(message.starts_with(&prefix), "{message}");
    assert!(message.contains(
        "` service tier `on_demand` on requests per minute (RPM): Limit 2, Used 2, Requested 1. Please try again in "
    ));
    assert!(message.ends_with(
        "s. Need more tokens? Upgrade to Dev Tier today at https://console.groq.com/settings/billing"
    ));

    let (status, _, _) = send("llama-3.1-8b-instant").await;
    assert_eq!(status, 200, "limits are per model");
    assert_eq!(sim.calls()[2].variant, "groq_rpm");

    // A minute gives back 60 / 86.4 of a request: not yet a whole one.
    sim.advance_clock(60_000);
    let (status, headers, _) = send(MODEL).await;
    assert_eq!(status, 200, "a new window");
    assert_six_headers(&headers, "997", 3 * REFILL_MS - 60_000);
    sim.shutdown().await;
}

#[tokio::test]
async fn groqs_day_refills_a_request_at_a_time() {
    let sim = start(SimConfig {
        mode: Mode::Groq,
        rpm: 100,
        groq_rpd: 4,
        ..SimConfig::default()
    })
    .await;
    fresh_day(&sim);
    let client = client();
    let send = || async {
        let (status, headers, text) = groq_chat(&client, &sim, MODEL).await;
        let remaining = header(&headers, "x-ratelimit-remaining-requests").map(str::to_owned);
        let retry: Option<u64> = header(&headers, "retry-after").and_then(|r| r.parse().ok());
        (status, remaining, retry, text)
    };
    let refill_s = 86_400 / 4;
    for remaining in ["3", "2", "1", "0"] {
        let (status, left, _, _) = send().await;
        assert_eq!((status, left.as_deref()), (200, Some(remaining)));
    }
    let (status, left, retry, text) = send().await;
    assert_eq!((status, left.as_deref()), (429, Some("0")));
    let retry = retry.expect("retry-after");
    assert!(retry <= refill_s && retry + 1 >= refill_s, "{retry}");
    assert!(
        text.contains("on requests per day (RPD): Limit 4, Used 4, Requested 1."),
        "{text}"
    );

    // One refill later, one request is back, and only one.
    sim.advance_clock(refill_s * 1000);
    let (status, left, _, _) = send().await;
    assert_eq!((status, left.as_deref()), (200, Some("0")));
    assert_eq!(send().await.0, 429);
    let variants: Vec<String> = sim.calls().into_iter().map(|c| c.variant).collect();
    assert_eq!(
        variants,
        ["ok", "ok", "ok", "ok", "groq_rpd", "ok", "groq_rpd"]
    );
    sim.shutdown().await;
}
