//! Injected faults: each kind's wire shape, matching, counts and order against the account.

use crate::common;

use std::time::{Duration, Instant};

use common::*;
use reqwest::header::HeaderMap;
use serde_json::{Value, json};
use sim::{FaultKind, FaultSpec, SimConfig};

/// Injects `spec`, sends one non-streaming request for `model`, returns status, headers, body.
async fn faulted(
    client: &reqwest::Client,
    sim: &sim::SimHandle,
    spec: Value,
    model: &str,
) -> (u16, HeaderMap, Value) {
    inject(client, sim, spec).await;
    let (status, headers, text) = chat(client, sim, KEY, &body(model, "hi", false)).await;
    (status, headers, parse(&text))
}

#[tokio::test]
async fn upstream_429_in_both_shapes_with_and_without_a_retry_hint() {
    let sim = start(SimConfig::default()).await;
    let client = client();
    let raw = format!(
        "{FREE} is temporarily rate-limited upstream. Please retry shortly, or add your own key to accumulate your rate limits: https://openrouter.ai/settings/integrations"
    );

    let (status, headers, v) = faulted(
        &client,
        &sim,
        json!({"kind": "upstream_429", "provider_name": "DigitalOcean"}),
        FREE,
    )
    .await;
    assert_eq!(status, 429);
    assert!(header(&headers, "retry-after").is_none());
    assert!(
        header(&headers, "x-ratelimit-limit").is_none(),
        "upstream 429s carry no X-RateLimit-*"
    );
    assert_eq!(
        v["error"],
        json!({
            "message": "Provider returned error",
            "code": 429,
            "metadata": {
                "raw": raw,
                "provider_name": "DigitalOcean",
                "is_byok": false,
                "limit_source": "upstream_provider_shared_pool",
                "remedy_hint": "Retry shortly, add your own provider key (https://openrouter.ai/settings/integrations), or route to another provider with provider routing: https://openrouter.ai/docs/features/provider-routing"
            }
        })
    );
    assert!(
        v["user_id"]
            .as_str()
            .is_some_and(|u| u.starts_with("user_"))
    );

    let (_, _, v) = faulted(
        &client,
        &sim,
        json!({"kind": "upstream_429", "shape": "2025"}),
        FREE,
    )
    .await;
    assert_eq!(
        v["error"]["metadata"],
        json!({"raw": raw, "provider_name": "Chutes"}),
        "2025 captures have only raw + provider_name"
    );

    let (status, headers, v) = faulted(
        &client,
        &sim,
        json!({"kind": "upstream_429", "provider_name": "Venice", "retry_after_s": 16.007, "shape": "2025"}),
        FREE,
    )
    .await;
    assert_eq!(status, 429);
    assert_eq!(header(&headers, "retry-after"), Some("17"));
    assert_eq!(
        v["error"]["metadata"],
        json!({
            "headers": {"Retry-After": "17"},
            "raw": raw,
            "provider_name": "Venice",
            "retry_after_seconds": 17,
            "retry_after_seconds_raw": 16.007
        })
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn high_demand_names_the_model_and_sets_rate_limit_headers() {
    let sim = start(SimConfig::default()).await;
    let now = fresh_day(&sim);
    let client = client();
    let (status, headers, v) = faulted(
        &client,
        &sim,
        json!({"kind": "high_demand", "limit": 15}),
        FREE_2,
    )
    .await;
    assert_eq!(status, 429);
    let reset = (now - now % 60_000 + 60_000).to_string();
    assert_eq!(header(&headers, "x-ratelimit-limit"), Some("15"));
    assert_eq!(header(&headers, "x-ratelimit-remaining"), Some("0"));
    assert_eq!(header(&headers, "x-ratelimit-reset"), Some(reset.as_str()));
    let message = v["error"]["message"].as_str().expect("message");
    assert!(
        message.starts_with("Rate limit exceeded: qwen/qwen3-coder/"),
        "{message}"
    );
    assert!(message.ends_with(
        ". High demand for qwen/qwen3-coder:free on OpenRouter - limited to 15 requests per minute. Please retry shortly."
    ));
    let meta = &v["error"]["metadata"];
    assert_eq!(
        meta["headers"],
        json!({"X-RateLimit-Limit": "15", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": reset})
    );
    assert_eq!(meta["provider_name"], Value::Null);
    assert_eq!(meta["limit_source"], json!("openrouter_shared_capacity"));
    assert!(
        meta["remedy_hint"]
            .as_str()
            .is_some_and(|h| h.starts_with("Retry shortly, or add your own provider key"))
    );

    let (_, headers, v) = faulted(
        &client,
        &sim,
        json!({"kind": "high_demand", "shape": "2025"}),
        FREE_2,
    )
    .await;
    assert_eq!(
        header(&headers, "x-ratelimit-limit"),
        Some("8"),
        "default cap 8"
    );
    let message = v["error"]["message"].as_str().expect("message");
    assert!(
        message.starts_with("Rate limit exceeded: limit_rpm/qwen/qwen3-coder/"),
        "{message}"
    );
    assert!(v["error"]["metadata"].get("limit_source").is_none());
    sim.shutdown().await;
}

#[tokio::test]
async fn typed_generic_and_capacity_429s() {
    let sim = start(SimConfig::default()).await;
    let client = client();

    let (status, _, v) = faulted(
        &client,
        &sim,
        json!({"kind": "typed_429", "provider_code": "throttled"}),
        PAID,
    )
    .await;
    assert_eq!(status, 429);
    assert_eq!(
        v["error"],
        json!({"message": "Rate limit exceeded", "code": 429,
               "metadata": {"error_type": "rate_limit_exceeded", "provider_code": "throttled"}})
    );

    let (status, headers, v) = faulted(&client, &sim, json!({"kind": "generic_429"}), PAID).await;
    assert_eq!(status, 429);
    assert_eq!(
        v,
        json!({"error": {"message": "Rate limit exceeded", "code": 429}})
    );
    assert!(
        header(&headers, "retry-after").is_none()
            && header(&headers, "x-ratelimit-limit").is_none()
    );

    let (status, headers, v) = faulted(&client, &sim, json!({"kind": "capacity_429"}), PAID).await;
    assert_eq!(status, 429);
    assert_eq!(header(&headers, "retry-after"), Some("40"));
    let e = &v["error"];
    assert!(
        e.get("code").is_none(),
        "the documented availability error has no code"
    );
    assert_eq!(
        e["message"],
        json!(format!(
            "All providers for {PAID} are at capacity. Retry after 40 seconds."
        ))
    );
    assert_eq!(e["error_type"], json!("rate_limit_exceeded"));
    assert_eq!(e["http_status"], json!(429));
    assert_eq!(e["availability"]["code"], json!("capacity_exhausted"));
    assert_eq!(e["availability"]["retry_after"], json!(40));
    assert_eq!(e["availability"]["requested_models"], json!([PAID]));
    assert_eq!(e["metadata"]["previous_errors"][0]["status"], json!(429));
    sim.shutdown().await;
}

#[tokio::test]
async fn payment_required_variants() {
    let sim = start(SimConfig::default()).await;
    let client = client();

    let (status, headers, v) = faulted(&client, &sim, json!({"kind": "credits_402"}), PAID).await;
    assert_eq!(status, 402);
    assert!(header(&headers, "retry-after").is_none());
    assert_eq!(
        v["error"],
        json!({
            "message": "Insufficient credits. Add more using https://openrouter.ai/settings/credits",
            "code": 402,
            "metadata": {
                "limit_source": "openrouter_credits",
                "remedy_hint": "Add credits at https://openrouter.ai/settings/credits, or lower max_tokens / prompt size to fit your remaining balance."
            }
        })
    );
    let (_, _, v) = faulted(
        &client,
        &sim,
        json!({"kind": "credits_402", "shape": "2025"}),
        PAID,
    )
    .await;
    assert!(v["error"].get("metadata").is_none(), "2025: message only");

    let (status, _, v) = faulted(&client, &sim, json!({"kind": "never_purchased_402"}), PAID).await;
    assert_eq!(status, 402);
    assert!(v["error"]["message"].as_str().is_some_and(|m| {
        m.starts_with("Insufficient credits. This account never purchased credits.")
    }));
    assert_eq!(
        v["error"]["metadata"],
        json!({"limit_source": "openrouter_credits"})
    );

    inject(&client, &sim, json!({"kind": "can_only_afford_402"})).await;
    let req = json!({"model": PAID, "messages": user("hi"), "max_tokens": 65536});
    let (status, _, text) = chat(&client, &sim, KEY, &req).await;
    assert_eq!(status, 402);
    let v = parse(&text);
    let message = "This request requires more credits, or fewer max_tokens. You requested up to 65536 tokens, but can only afford 570. To increase, visit https://openrouter.ai/settings/credits and add more credits";
    assert_eq!(v["error"]["message"], json!(message));
    assert_eq!(v["error"]["metadata"]["provider_name"], Value::Null);
    assert_eq!(
        v["error"]["metadata"]["previous_errors"],
        json!([{"code": 402, "message": message}])
    );

    let (status, headers, v) = faulted(
        &client,
        &sim,
        json!({"kind": "in_flight_402", "retry_after_s": 3}),
        PAID,
    )
    .await;
    assert_eq!(status, 402);
    assert_eq!(header(&headers, "retry-after"), Some("3"));
    assert_eq!(
        v["error"]["metadata"]["reason"],
        json!("in_flight_budget_exhausted")
    );
    assert_eq!(
        v["error"]["metadata"]["limit_source"],
        json!("openrouter_in_flight_budget")
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn auth_moderation_not_found_bad_request_and_server_errors() {
    let sim = start(SimConfig::default()).await;
    let client = client();

    let (status, _, v) = faulted(&client, &sim, json!({"kind": "unauthorized_401"}), PAID).await;
    assert_eq!(
        (status, v),
        (
            401,
            json!({"error": {"message": "No auth credentials found", "code": 401}})
        )
    );

    inject(
        &client,
        &sim,
        json!({"kind": "moderation_403", "provider_name": "Meta"}),
    )
    .await;
    let long = format!("{}{}", "a".repeat(80), "b".repeat(80));
    let (status, _, text) = chat(&client, &sim, KEY, &body(FREE, &long, false)).await;
    assert_eq!(status, 403);
    let v = parse(&text);
    assert_eq!(
        v["error"]["message"],
        json!(format!(
            "{FREE} requires moderation on Meta. Your input was flagged for \"misc\". No credits were charged."
        ))
    );
    assert_eq!(v["error"]["metadata"]["reasons"], json!(["misc"]));
    assert_eq!(
        v["error"]["metadata"]["flagged_input"],
        json!(format!("{}...{}", "a".repeat(50), "b".repeat(50)))
    );

    let (status, _, v) = faulted(&client, &sim, json!({"kind": "not_found_404"}), FREE).await;
    assert_eq!(status, 404);
    assert_eq!(
        v["error"]["message"],
        json!(
            "No endpoints found matching your data policy (Free model publication). Configure: https://openrouter.ai/settings/privacy"
        )
    );

    let (status, _, v) = faulted(
        &client,
        &sim,
        json!({"kind": "bad_request_400"}),
        "nope/model",
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(
        v["error"]["message"],
        json!("'models' array must have 3 items or fewer.")
    );

    let (status, _, v) = faulted(&client, &sim, json!({"kind": "server_500"}), PAID).await;
    assert_eq!(status, 500);
    assert_eq!(
        v["error"],
        json!({"message": "Internal Server Error", "code": 500})
    );

    let (status, _, v) = faulted(
        &client,
        &sim,
        json!({"kind": "bad_gateway_502", "provider_name": "Together"}),
        PAID,
    )
    .await;
    assert_eq!(status, 502);
    assert_eq!(
        v["error"],
        json!({"message": "Provider returned error", "code": 502,
               "metadata": {"raw": "upstream connect error", "provider_name": "Together", "is_byok": false}})
    );

    let (status, _, v) = faulted(&client, &sim, json!({"kind": "overloaded_529"}), PAID).await;
    assert_eq!(status, 529);
    assert_eq!(v["error"]["message"], json!("Provider returned error"));
    assert_eq!(
        v["error"]["metadata"]["error_type"],
        json!("provider_overloaded")
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn faults_match_by_model_and_key_in_insertion_order_and_count_down() {
    let sim = start(SimConfig::default()).await;
    let client = client();
    let first = inject(
        &client,
        &sim,
        json!({"kind": "server_500", "model": PAID, "count": 2}),
    )
    .await;
    let second = inject(
        &client,
        &sim,
        json!({"kind": "credits_402", "key": OTHER_KEY}),
    )
    .await;
    assert!(second > first);

    let listed = parse(
        &client
            .get(control_url(&sim, "faults"))
            .send()
            .await
            .expect("list")
            .text()
            .await
            .expect("body"),
    );
    assert_eq!(
        listed,
        json!([
            {"id": first, "kind": "server_500", "count": 2, "model": PAID},
            {"id": second, "kind": "credits_402", "count": 1, "key": OTHER_KEY}
        ])
    );

    let status = |k: &'static str, m: &'static str| {
        let client = client.clone();
        let sim = &sim;
        async move { chat(&client, sim, k, &body(m, "hi", false)).await.0 }
    };
    assert_eq!(
        status(KEY, FREE).await,
        200,
        "no fault matches this model and key"
    );
    assert_eq!(
        status(OTHER_KEY, PAID).await,
        500,
        "the first matching fault wins"
    );
    assert_eq!(status(OTHER_KEY, FREE).await, 402);
    assert_eq!(status(OTHER_KEY, FREE).await, 200, "count 1 is spent");
    assert_eq!(status(KEY, PAID).await, 500);
    assert_eq!(status(KEY, PAID).await, 200, "count 2 is spent");

    inject(&client, &sim, json!({"kind": "server_500", "count": 5})).await;
    let res = client
        .delete(control_url(&sim, "faults"))
        .send()
        .await
        .expect("delete");
    assert_eq!(
        parse(&res.text().await.expect("body")),
        json!({"cleared": 1})
    );
    assert_eq!(status(KEY, PAID).await, 200);

    // The library entry point queues the same faults.
    let mut spec = FaultSpec::new(FaultKind::NotFound404);
    spec.model = Some(FREE.to_owned());
    sim.inject(spec);
    assert_eq!(status(KEY, PAID).await, 200);
    assert_eq!(status(KEY, FREE).await, 404);
    sim.shutdown().await;
}

#[tokio::test]
async fn the_account_is_checked_before_faults_and_faulted_requests_count() {
    let sim = start(SimConfig {
        rpm: 1,
        ..SimConfig::default()
    })
    .await;
    fresh_day(&sim);
    let client = client();
    inject(&client, &sim, json!({"kind": "server_500", "count": 2})).await;

    let (s1, _, _) = chat(&client, &sim, KEY, &body(FREE, "hi", false)).await;
    let (s2, _, t2) = chat(&client, &sim, KEY, &body(FREE, "hi", false)).await;
    assert_eq!(
        (s1, s2),
        (500, 429),
        "the faulted call used the window: {t2}"
    );
    assert!(t2.contains("free-models-per-min"));
    let listed = parse(
        &client
            .get(control_url(&sim, "faults"))
            .send()
            .await
            .expect("list")
            .text()
            .await
            .expect("body"),
    );
    assert_eq!(
        listed[0]["count"],
        json!(1),
        "the refused request consumed no fault"
    );

    sim.advance_clock(60_000);
    let (s3, _, _) = chat(&client, &sim, KEY, &body(FREE, "hi", false)).await;
    assert_eq!(s3, 500);
    let used =
        key_info(&client, &sim, KEY).await["data"]["free_model_daily_requests"]["used"].clone();
    assert_eq!(used, json!(3));
    sim.shutdown().await;
}

#[tokio::test]
async fn a_timeout_holds_the_headers() {
    let sim = start(SimConfig::default()).await;
    let client = client();
    inject(&client, &sim, json!({"kind": "timeout", "delay_ms": 5_000})).await;
    let started = Instant::now();
    let err = client
        .post(chat_url(&sim))
        .bearer_auth(KEY)
        .body(body(PAID, "hi", false).to_string())
        .timeout(Duration::from_millis(300))
        .send()
        .await
        .expect_err("the client gives up first");
    assert!(err.is_timeout(), "{err}");
    assert!(started.elapsed() >= Duration::from_millis(300));

    inject(&client, &sim, json!({"kind": "timeout", "delay_ms": 200})).await;
    let started = Instant::now();
    let (status, _, text) = chat(&client, &sim, KEY, &body(PAID, "hi", false)).await;
    assert!(started.elapsed() >= Duration::from_millis(200));
    assert_eq!(status, 200, "after the hold the answer is normal");
    assert_eq!(
        parse(&text)["choices"][0]["message"]["content"],
        json!("Echo: hi")
    );
    assert_eq!(sim.calls()[0].variant, "timeout");

    // Shutdown cuts the 5 s hold short instead of waiting for it.
    let started = Instant::now();
    sim.shutdown().await;
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn broken_non_streaming_bodies() {
    let sim = start(SimConfig::default()).await;
    let client = client();

    inject(&client, &sim, json!({"kind": "wrong_content_type"})).await;
    let (status, headers, text) = chat(&client, &sim, KEY, &body(PAID, "hi", false)).await;
    assert_eq!(status, 200);
    assert!(header(&headers, "content-type").is_some_and(|c| c.starts_with("text/html")));
    assert!(text.starts_with("<html>"));

    inject(&client, &sim, json!({"kind": "malformed_json"})).await;
    let (status, headers, text) = chat(&client, &sim, KEY, &body(PAID, "hi", false)).await;
    assert_eq!(status, 200);
    assert_eq!(header(&headers, "content-type"), Some("application/json"));
    assert!(text.starts_with(r#"{"id":"gen-"#));
    assert!(serde_json::from_str::<Value>(&text).is_err(), "{text}");

    inject(
        &client,
        &sim,
        json!({"kind": "huge_body", "size_bytes": 1_048_576}),
    )
    .await;
    let (status, _, text) = chat(&client, &sim, KEY, &body(PAID, "hi", false)).await;
    assert_eq!(status, 200);
    assert_eq!(text.len(), 1_048_576);
    assert_eq!(
        parse(&text)["object"],
        json!("chat.completion"),
        "huge but valid"
    );

    inject(
        &client,
        &sim,
        json!({"kind": "huge_body", "size_bytes": 100_000}),
    )
    .await;
    let (_, headers, text) = chat(&client, &sim, KEY, &body(PAID, "hi", true)).await;
    assert_eq!(header(&headers, "content-type"), Some("text/event-stream"));
    assert_eq!(text.len(), 100_000);
    assert!(text.ends_with("data: [DONE]\n\n"));

    inject(&client, &sim, json!({"kind": "truncated"})).await;
    let res = post(
        &client,
        &chat_url(&sim),
        Some(KEY),
        &body(PAID, "hi", false),
    )
    .await;
    assert_eq!(res.status().as_u16(), 200);
    assert!(res.text().await.is_err(), "the body is cut off");

    inject(
        &client,
        &sim,
        json!({"kind": "midstream_error", "code": 502}),
    )
    .await;
    let (status, _, text) = chat(&client, &sim, KEY, &body(PAID, "one two", false)).await;
    assert_eq!(status, 200);
    let choice = parse(&text)["choices"][0].clone();
    assert_eq!(choice["finish_reason"], json!("error"));
    assert_eq!(choice["message"]["content"], json!("Echo: "));
    assert_eq!(choice["error"]["code"], json!(502));

    inject(
        &client,
        &sim,
        json!({"kind": "midstream_error", "layout": "empty_choices", "code": 429}),
    )
    .await;
    let (status, _, text) = chat(&client, &sim, KEY, &body(PAID, "one two", false)).await;
    assert_eq!(status, 200);
    let v = parse(&text);
    assert!(v.get("choices").is_none());
    assert_eq!(v["error"]["code"], json!(429));

    let variants: Vec<String> = sim.calls().into_iter().map(|c| c.variant).collect();
    assert_eq!(
        variants,
        [
            "wrong_content_type",
            "malformed_json",
            "huge_body",
            "huge_body",
            "truncated",
            "midstream_error",
            "midstream_error"
        ]
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn bad_fault_specs_are_refused_precisely() {
    let sim = start(SimConfig::default()).await;
    let client = client();
    let cases = [
        (json!({"kind": "nope"}), "unknown variant `nope`"),
        (json!({"count": 1}), "missing field `kind`"),
        (
            json!({"kind": "server_500", "count": 0}),
            "count must be at least 1",
        ),
        (
            json!({"kind": "server_500", "colour": "red"}),
            "unknown field `colour`",
        ),
        (
            json!({"kind": "upstream_429", "limit": 3}),
            "field `limit` does not apply to kind `upstream_429`",
        ),
        (
            json!({"kind": "upstream_429", "retry_after_s": -1}),
            "retry_after_s must be",
        ),
        (
            json!({"kind": "midstream_error", "layout": "sideways"}),
            "unknown variant `sideways`",
        ),
        (
            json!({"kind": "high_demand", "shape": "2024"}),
            "unknown variant `2024`",
        ),
    ];
    for (spec, expected) in cases {
        let res = post(&client, &control_url(&sim, "faults"), None, &spec).await;
        assert_eq!(res.status().as_u16(), 400, "{spec}");
        let v = parse(&res.text().await.expect("body"));
        assert_eq!(v["error"]["code"], json!("invalid_request"));
        let message = v["error"]["message"].as_str().expect("message");
        assert!(message.contains(expected), "{spec}: {message}");
    }
    let res = client
        .post(control_url(&sim, "faults"))
        .body("{")
        .send()
        .await
        .expect("sent");
    assert_eq!(res.status().as_u16(), 400);
    sim.shutdown().await;
}
