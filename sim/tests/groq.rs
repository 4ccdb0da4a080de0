//! Groq mode: six `x-ratelimit-*` headers on every response, per (key, model) RPM, Groq's 429.

mod common;

use common::*;
use reqwest::header::HeaderMap;
use serde_json::json;
use sim::{Mode, SimConfig};

const MODEL: &str = "llama-3.3-70b-versatile";

fn go_duration_ms(s: &str) -> u64 {
    // Enough of Go's format for the values the simulator writes: [Nh][Nm][N[.N]s] or Nms.
    if let Some(ms) = s.strip_suffix("ms") {
        return ms.parse().expect("ms");
    }
    let mut total = 0.0;
    let mut num = String::new();
    for c in s.chars() {
        match c {
            'h' => total += num.parse::<f64>().expect("h") * 3_600_000.0,
            'm' => total += num.parse::<f64>().expect("m") * 60_000.0,
            's' => total += num.parse::<f64>().expect("s") * 1000.0,
            _ => {
                num.push(c);
                continue;
            }
        }
        num.clear();
    }
    total.round() as u64
}

fn assert_six_headers(headers: &HeaderMap, limit: &str, remaining: &str) -> u64 {
    assert_eq!(header(headers, "x-ratelimit-limit-requests"), Some(limit));
    assert_eq!(
        header(headers, "x-ratelimit-remaining-requests"),
        Some(remaining)
    );
    assert_eq!(header(headers, "x-ratelimit-limit-tokens"), Some("12000"));
    let tokens: u64 = header(headers, "x-ratelimit-remaining-tokens")
        .and_then(|t| t.parse().ok())
        .expect("tokens");
    assert!(tokens < 12_000);
    let reset = header(headers, "x-ratelimit-reset-requests").expect("reset-requests");
    assert_eq!(header(headers, "x-ratelimit-reset-tokens"), Some(reset));
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
    let url = format!("http://{}/openai/v1/chat/completions", sim.addr);
    let send = |model: &'static str| {
        let client = client.clone();
        let url = url.clone();
        async move {
            let res = post(&client, &url, Some(KEY), &body(model, "hi", false)).await;
            let status = res.status().as_u16();
            let headers = res.headers().clone();
            (status, headers, res.text().await.expect("body"))
        }
    };

    let (status, headers, _) = send(MODEL).await;
    assert_eq!(status, 200);
    assert_six_headers(&headers, "2", "1");
    assert!(
        header(&headers, "retry-after").is_none(),
        "retry-after only on 429"
    );
    let (status, headers, _) = send(MODEL).await;
    assert_eq!(status, 200);
    assert_six_headers(&headers, "2", "0");

    let (status, headers, text) = send(MODEL).await;
    assert_eq!(status, 429);
    let wait = assert_six_headers(&headers, "2", "0");
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

    sim.advance_clock(60_000);
    let (status, headers, _) = send(MODEL).await;
    assert_eq!(status, 200, "a new window");
    assert_six_headers(&headers, "2", "1");
    sim.shutdown().await;
}
