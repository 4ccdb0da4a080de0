//! One simulator, several providers: each base URL plays its provider's quota and wire shapes,
//! and the call log says which one every request was addressed to.

use crate::common;

use common::*;
use serde_json::Value;
use sim::{Provider, SimConfig};

async fn send(
    client: &reqwest::Client,
    sim: &sim::SimHandle,
    provider: Provider,
    key: &str,
    model: &str,
) -> (u16, reqwest::header::HeaderMap, String) {
    let url = format!("{}/chat/completions", sim.base_url_of(provider));
    let res = post(client, &url, Some(key), &body(model, "hi", false)).await;
    let status = res.status().as_u16();
    let headers = res.headers().clone();
    (status, headers, res.text().await.expect("body"))
}

#[tokio::test]
async fn every_provider_counts_its_own_quota_and_the_log_names_it() {
    let sim = start(SimConfig {
        rpm: 1,
        groq_rpm: 1,
        ..SimConfig::default()
    })
    .await;
    fresh_day(&sim);
    let c = client();
    let free = "meta-llama/llama-3.3-70b-instruct:free";
    assert_eq!(
        send(&c, &sim, Provider::OpenRouter, "sk-or", free).await.0,
        200
    );
    assert_eq!(
        send(&c, &sim, Provider::OpenRouter, "sk-or", free).await.0,
        429
    );
    // Groq's window is its own: the spent OpenRouter account does not touch it.
    let (status, headers, _) =
        send(&c, &sim, Provider::Groq, "gsk", "llama-3.3-70b-versatile").await;
    assert_eq!(status, 200);
    assert_eq!(
        header(&headers, "x-ratelimit-limit-requests"),
        Some("1000"),
        "Groq states its day, not the minute"
    );
    let (status, headers, body) =
        send(&c, &sim, Provider::Groq, "gsk", "llama-3.3-70b-versatile").await;
    assert_eq!(status, 429);
    assert!(header(&headers, "retry-after").is_some());
    assert_eq!(parse(&body)["error"]["code"], "rate_limit_exceeded");
    // Another Groq model on the same key has its own window.
    assert_eq!(
        send(&c, &sim, Provider::Groq, "gsk", "gemma2-9b-it")
            .await
            .0,
        200
    );
    // The paid provider has no quota at all.
    for _ in 0..3 {
        let (status, headers, _) = send(&c, &sim, Provider::Generic, "sk-paid", "gpt-x").await;
        assert_eq!(status, 200);
        assert!(header(&headers, "x-ratelimit-limit-requests").is_none());
    }
    let log: Vec<(Provider, String, u16)> = sim
        .calls()
        .into_iter()
        .map(|r| (r.provider, r.key, r.status))
        .collect();
    let of = |p: Provider| log.iter().filter(|(q, _, _)| *q == p).count();
    assert_eq!(
        (
            of(Provider::OpenRouter),
            of(Provider::Groq),
            of(Provider::Generic)
        ),
        (2, 3, 3)
    );
    assert!(
        log.iter()
            .any(|(p, k, s)| *p == Provider::Groq && k == "gsk" && *s == 429)
    );
}

#[tokio::test]
async fn groq_refuses_a_spent_day_naming_rpd_with_the_wait_to_the_refill() {
    let sim = start(SimConfig {
        groq_rpd: 2,
        ..SimConfig::default()
    })
    .await;
    fresh_day(&sim);
    let c = client();
    let model = "llama-3.3-70b-versatile";
    for _ in 0..2 {
        assert_eq!(send(&c, &sim, Provider::Groq, "gsk", model).await.0, 200);
    }
    // The next minute still finds the day spent.
    sim.advance_clock(60_000);
    let (status, headers, body) = send(&c, &sim, Provider::Groq, "gsk", model).await;
    assert_eq!(status, 429);
    let message = parse(&body)["error"]["message"]
        .as_str()
        .map(str::to_string);
    assert!(
        message
            .as_deref()
            .is_some_and(|m| m.contains("requests per day (RPD): Limit 2, Used 2")),
        "{message:?}"
    );
    let retry: u64 = header(&headers, "retry-after")
        .and_then(|v| v.parse().ok())
        .expect("retry-after");
    assert!(retry > 300 && retry <= 86_400, "{retry}");
    assert_eq!(
        sim.calls().last().map(|r| r.variant.clone()).as_deref(),
        Some("groq_rpd")
    );
}

#[tokio::test]
async fn gemini_refuses_a_spent_minute_and_a_spent_day_as_google_does() {
    let sim = start(SimConfig {
        gemini_rpm: 2,
        gemini_rpd: 3,
        ..SimConfig::default()
    })
    .await;
    // At the start of a minute, so the first three calls share one.
    let now = sim.advance_clock(0);
    sim.advance_clock(60_000 - now % 60_000 + 1_000);
    let c = client();
    let model = "gemini-2.5-flash";
    for _ in 0..2 {
        assert_eq!(
            send(&c, &sim, Provider::Gemini, "AIza-1", model).await.0,
            200
        );
    }
    let (status, headers, body) = send(&c, &sim, Provider::Gemini, "AIza-1", model).await;
    assert_eq!(status, 429);
    assert!(
        header(&headers, "x-ratelimit-limit-requests").is_none(),
        "no rate-limit headers"
    );
    let v: Value = serde_json::from_str(&body).expect("JSON");
    let error = &v[0]["error"];
    assert_eq!(error["status"], "RESOURCE_EXHAUSTED");
    let quota_id = |e: &Value| {
        e["details"][0]["violations"][0]["quotaId"]
            .as_str()
            .map(str::to_string)
    };
    assert_eq!(
        quota_id(error).as_deref(),
        Some("GenerateRequestsPerMinutePerProjectPerModel-FreeTier")
    );
    let delay = error["details"][2]["retryDelay"]
        .as_str()
        .expect("RetryInfo");
    let seconds: u64 = delay.trim_end_matches('s').parse().expect("seconds");
    assert!((1..=60).contains(&seconds), "{delay}");

    // The next minute: one more call spends the day (3), then the day refuses.
    sim.advance_clock(60_000);
    assert_eq!(
        send(&c, &sim, Provider::Gemini, "AIza-1", model).await.0,
        200
    );
    let (status, _, body) = send(&c, &sim, Provider::Gemini, "AIza-1", model).await;
    assert_eq!(status, 429);
    let v: Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(
        quota_id(&v[0]["error"]).as_deref(),
        Some("GenerateRequestsPerDayPerProjectPerModel-FreeTier")
    );
    // Another key is another project: its own day.
    assert_eq!(
        send(&c, &sim, Provider::Gemini, "AIza-2", model).await.0,
        200
    );
    // A day later (past midnight Pacific, whatever the time now) the quota is back.
    sim.advance_clock(86_400_000);
    assert_eq!(
        send(&c, &sim, Provider::Gemini, "AIza-1", model).await.0,
        200
    );
    let variants: Vec<String> = sim.calls().into_iter().map(|r| r.variant).collect();
    assert!(
        variants.contains(&"gemini_per_minute".to_string()),
        "{variants:?}"
    );
    assert!(
        variants.contains(&"gemini_per_day".to_string()),
        "{variants:?}"
    );
}

#[tokio::test]
async fn a_generic_provider_with_a_limit_states_it_in_openais_headers() {
    let sim = start(SimConfig {
        generic_rpm: 2,
        window_s: 10,
        ..SimConfig::default()
    })
    .await;
    // A second into a window of 10 s, so the three calls share one.
    let start = fresh_day(&sim);
    let c = client();
    let requests = |h: &reqwest::header::HeaderMap| {
        let get =
            |name: &str| header(h, &format!("x-ratelimit-{name}-requests")).map(str::to_owned);
        (get("limit"), get("remaining"), get("reset"))
    };
    // The reset is the time to the window's end, on the sim clock.
    let until_end = |reset: &Option<String>, from: u64| {
        let ms = go_duration_ms(reset.as_deref().expect("reset-requests"));
        assert!(ms <= 9_000 - from && ms + 500 > 9_000 - from, "{reset:?}");
    };
    let (status, headers, _) = send(&c, &sim, Provider::Generic, "sk-paid", "gpt-x").await;
    assert_eq!(status, 200);
    let (limit, left, reset) = requests(&headers);
    assert_eq!((limit.as_deref(), left.as_deref()), (Some("2"), Some("1")));
    until_end(&reset, 0);
    let now = sim.advance_clock(0);
    sim.advance_clock(start + 7_000 - now);
    let (status, headers, _) = send(&c, &sim, Provider::Generic, "sk-paid", "gpt-x").await;
    assert_eq!(status, 200);
    let (_, left, reset) = requests(&headers);
    assert_eq!(left.as_deref(), Some("0"));
    until_end(&reset, 7_000);

    let (status, headers, body) = send(&c, &sim, Provider::Generic, "sk-paid", "gpt-x").await;
    assert_eq!(status, 429);
    assert_eq!(requests(&headers).1.as_deref(), Some("0"));
    assert_eq!(
        header(&headers, "retry-after"),
        Some("2"),
        "2 s to the window's end"
    );
    let v = parse(&body);
    assert_eq!(
        (
            &v["error"]["type"],
            &v["error"]["param"],
            &v["error"]["code"]
        ),
        (
            &Value::from("requests"),
            &Value::Null,
            &Value::from("rate_limit_exceeded")
        )
    );
    let message = v["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("Rate limit reached for gpt-x in organization org_")
            && message.contains("on requests per min (RPM): Limit 2, Used 2, Requested 1."),
        "{message}"
    );
    // Another model has its own window; the next window serves again.
    assert_eq!(
        send(&c, &sim, Provider::Generic, "sk-paid", "gpt-y")
            .await
            .0,
        200
    );
    sim.advance_clock(2_000);
    let (status, headers, _) = send(&c, &sim, Provider::Generic, "sk-paid", "gpt-x").await;
    assert_eq!(status, 200);
    assert_eq!(requests(&headers).1.as_deref(), Some("1"));

    let variants: Vec<String> = sim.calls().into_iter().map(|r| r.variant).collect();
    assert_eq!(variants, ["ok", "ok", "generic_rpm", "ok", "ok"]);
}
