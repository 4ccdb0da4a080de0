//! What an answer costs: OpenRouter's `usage.cost` (USD), shown when the request asks for usage
//! accounting (`"usage": {"include": true}`), in the body and in a stream's last usage chunk;
//! 0 for free models; from the model's price for paid ones; never from the other providers; and
//! what each answer was charged, in the call log.

use crate::common;

use common::*;
use serde_json::{Value, json};
use sim::{ModelPrice, Price, Provider, SimConfig, UsageCost};

/// The default price of a paid model, USD per million input and output tokens.
const DEFAULT_IN: f64 = 0.10;
const DEFAULT_OUT: f64 = 0.40;

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-12 * a.abs().max(b.abs()).max(1e-12)
}

/// What `usage` should cost at `input`/`output` USD per million tokens.
fn priced(usage: &Value, input: f64, output: f64) -> f64 {
    let tokens = |k: &str| usage[k].as_u64().expect("token count") as f64;
    tokens("prompt_tokens") * input / 1e6 + tokens("completion_tokens") * output / 1e6
}

fn cost(usage: &Value) -> f64 {
    usage["cost"].as_f64().expect("usage.cost")
}

fn assert_no_cost(usage: &Value) {
    assert!(usage["total_tokens"].is_u64(), "usage is there: {usage}");
    assert!(usage.get("cost").is_none(), "no cost unasked: {usage}");
    assert!(usage.get("cost_details").is_none(), "{usage}");
}

/// The answer's `usage` object, streamed or not.
async fn usage_of(client: &reqwest::Client, sim: &sim::SimHandle, req: &Value) -> Value {
    let (status, _, text) = chat(client, sim, KEY, req).await;
    assert_eq!(status, 200, "{text}");
    if req["stream"] == json!(true) {
        let chunks = chunks(&sse_events(&text));
        let with_usage: Vec<&Value> = chunks.iter().filter(|c| c.get("usage").is_some()).collect();
        assert_eq!(with_usage.len(), 1, "usage exactly once: {text}");
        assert!(
            std::ptr::eq(with_usage[0], chunks.last().expect("a chunk")),
            "usage in the final chunk: {text}"
        );
        with_usage[0]["usage"].clone()
    } else {
        parse(&text)["usage"].clone()
    }
}

#[tokio::test]
async fn a_paid_answer_shows_its_cost_only_when_asked() {
    let sim = start(SimConfig::default()).await;
    let client = client();
    let text = "the cost of four words [[answer:one two three four five]]";
    for stream in [false, true] {
        let unasked = usage_of(&client, &sim, &body(PAID, text, stream)).await;
        assert_no_cost(&unasked);

        let usage = usage_of(&client, &sim, &asking_cost(body(PAID, text, stream))).await;
        assert_eq!(usage["completion_tokens"], json!(5), "stream {stream}");
        let expected = priced(&usage, DEFAULT_IN, DEFAULT_OUT);
        assert!(expected > 0.0);
        assert!(
            close(cost(&usage), expected),
            "stream {stream}: {usage} vs {expected}"
        );
        let details = &usage["cost_details"];
        assert!(close(
            details["upstream_inference_cost"].as_f64().expect("total"),
            expected
        ));
        assert!(close(
            details["upstream_inference_prompt_cost"]
                .as_f64()
                .expect("prompt"),
            priced(&usage, DEFAULT_IN, 0.0)
        ));
        assert!(close(
            details["upstream_inference_completions_cost"]
                .as_f64()
                .expect("completion"),
            priced(&usage, 0.0, DEFAULT_OUT)
        ));
    }
    sim.shutdown().await;
}

#[tokio::test]
async fn a_free_answer_costs_zero_when_asked_and_shows_nothing_unasked() {
    let sim = start(SimConfig {
        keepalive_comments: 0,
        ..SimConfig::default()
    })
    .await;
    fresh_day(&sim);
    let client = client();
    for model in [FREE, "openrouter/free"] {
        for stream in [false, true] {
            let usage = usage_of(&client, &sim, &asking_cost(body(model, "hi", stream))).await;
            // An integer zero, as the captures of `:free` calls write it.
            assert_eq!(usage["cost"], json!(0), "{model} stream {stream}");
            assert!(usage["cost"].is_u64());
            assert_eq!(usage["cost_details"]["upstream_inference_cost"], json!(0));

            let unasked = usage_of(&client, &sim, &body(model, "hi", stream)).await;
            assert_no_cost(&unasked);
        }
    }
    // Asking is `{"include": true}`; anything else asks for nothing.
    for usage in [
        json!({"include": false}),
        json!(true),
        json!({"include": "yes"}),
    ] {
        let mut req = body(FREE, "hi", false);
        req["usage"] = usage;
        assert_no_cost(&usage_of(&client, &sim, &req).await);
    }
    sim.shutdown().await;
}

#[tokio::test]
async fn usage_layout_b_carries_the_cost_on_its_second_finish_chunk() {
    let sim = start(SimConfig::default()).await;
    let client = client();
    inject(&client, &sim, json!({"kind": "usage_layout_b"})).await;
    let (status, _, text) = chat(&client, &sim, KEY, &asking_cost(body(PAID, "hi", true))).await;
    assert_eq!(status, 200);
    let chunks = chunks(&sse_events(&text));
    let last = chunks.last().expect("a chunk");
    assert_eq!(last["choices"][0]["finish_reason"], json!("stop"));
    let usage = &last["usage"];
    assert!(close(cost(usage), priced(usage, DEFAULT_IN, DEFAULT_OUT)));
    sim.shutdown().await;
}

#[tokio::test]
async fn prices_set_by_handle_or_control_api_make_the_cost() {
    let sim = start(SimConfig::default()).await;
    let client = client();
    let other = "anthropic/claude-sonnet-4";
    let set = sim
        .set_prices(&[ModelPrice {
            model: PAID.to_owned(),
            price: Price {
                input: 3.0,
                output: 15.0,
            },
        }])
        .expect("a valid price");
    assert_eq!(set.len(), 2, "the default and {PAID}: {set:?}");
    let usage = usage_of(&client, &sim, &asking_cost(body(PAID, "a b c d", false))).await;
    assert!(close(cost(&usage), priced(&usage, 3.0, 15.0)), "{usage}");
    let usage = usage_of(&client, &sim, &asking_cost(body(other, "a b c d", true))).await;
    assert!(
        close(cost(&usage), priced(&usage, DEFAULT_IN, DEFAULT_OUT)),
        "a model without a price of its own costs the default: {usage}"
    );

    let (status, v) = control(
        &client,
        &sim,
        "POST",
        "prices",
        Some(json!({"*": {"input": 1.0, "output": 2.0}})),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["*"], json!({"input": 1.0, "output": 2.0}));
    assert_eq!(v[PAID], json!({"input": 3.0, "output": 15.0}));
    let usage = usage_of(&client, &sim, &asking_cost(body(other, "a b c d", false))).await;
    assert!(close(cost(&usage), priced(&usage, 1.0, 2.0)), "{usage}");

    // All or none: a free model's price, a negative or incomplete one refuse the whole set.
    for bad in [
        json!({"z/paid": {"input": 1.0, "output": 1.0}, "a/b:free": {"input": 1.0, "output": 1.0}}),
        json!({"z/paid": {"input": -1.0, "output": 1.0}}),
        json!({"z/paid": {"input": 1.0}}),
        json!({"z/paid": "1/2"}),
    ] {
        let (status, v) = control(&client, &sim, "POST", "prices", Some(bad.clone())).await;
        assert_eq!(status, 400, "{bad}: {v}");
        assert_eq!(v["error"]["code"], json!("invalid_request"));
    }
    let (status, v) = control(&client, &sim, "GET", "prices", None).await;
    assert_eq!(status, 200);
    assert_eq!(
        v,
        json!({"*": {"input": 1.0, "output": 2.0}, PAID: {"input": 3.0, "output": 15.0}}),
        "refused sets changed nothing"
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn usage_cost_always_shows_the_cost_unasked() {
    let sim = start(SimConfig {
        usage_cost: UsageCost::Always,
        ..SimConfig::default()
    })
    .await;
    let client = client();
    for stream in [false, true] {
        let usage = usage_of(&client, &sim, &body(PAID, "hi", stream)).await;
        assert!(close(cost(&usage), priced(&usage, DEFAULT_IN, DEFAULT_OUT)));
    }
    let (status, v) = control(
        &client,
        &sim,
        "POST",
        "config",
        Some(json!({"usage_cost": "asked"})),
    )
    .await;
    assert_eq!((status, &v["usage_cost"]), (200, &json!("asked")));
    assert_no_cost(&usage_of(&client, &sim, &body(PAID, "hi", false)).await);
    sim.shutdown().await;
}

#[tokio::test]
async fn other_providers_never_state_a_cost() {
    let sim = start(SimConfig::default()).await;
    let client = client();
    for (provider, model) in [
        (Provider::Groq, "llama-3.3-70b-versatile"),
        (Provider::Gemini, "gemini-2.5-flash"),
        (Provider::Generic, PAID),
    ] {
        for stream in [false, true] {
            let url = format!("{}/chat/completions", sim.base_url_of(provider));
            let req = asking_cost(body(model, "hi", stream));
            let res = post(&client, &url, Some(KEY), &req).await;
            assert_eq!(res.status().as_u16(), 200, "{provider:?}");
            let text = res.text().await.expect("body");
            let usage = if stream {
                chunks(&sse_events(&text))
                    .last()
                    .expect("a chunk")
                    .get("usage")
                    .cloned()
                    .expect("usage")
            } else {
                parse(&text)["usage"].clone()
            };
            assert_no_cost(&usage);
        }
    }
    assert!(
        sim.calls().iter().all(|c| c.cost_usd.is_none()),
        "{:?}",
        sim.calls()
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn the_call_log_records_what_each_answer_was_charged() {
    let sim = start(SimConfig {
        rpm: 1,
        ..SimConfig::default()
    })
    .await;
    fresh_day(&sim);
    let client = client();
    let unasked = usage_of(&client, &sim, &body(PAID, "one two three", false)).await;
    let asked = usage_of(&client, &sim, &asking_cost(body(PAID, "one two", true))).await;
    usage_of(&client, &sim, &body(FREE, "hi", false)).await;
    let (status, _, _) = chat(&client, &sim, KEY, &body(FREE, "hi", false)).await;
    assert_eq!(status, 429);
    inject(&client, &sim, json!({"kind": "server_500"})).await;
    let (status, _, _) = chat(&client, &sim, KEY, &asking_cost(body(PAID, "hi", false))).await;
    assert_eq!(status, 500);
    inject(
        &client,
        &sim,
        json!({"kind": "truncated", "after_chunks": 1}),
    )
    .await;
    let _ = post(
        &client,
        &chat_url(&sim),
        Some(KEY),
        &asking_cost(body(PAID, "a b c", true)),
    )
    .await
    .text()
    .await;
    inject(&client, &sim, json!({"kind": "stall", "delay_ms": 10})).await;
    let stalled = usage_of(&client, &sim, &body(PAID, "one two", false)).await;

    let calls = sim.calls();
    let logged: Vec<(&str, Option<f64>)> = calls
        .iter()
        .map(|c| (c.variant.as_str(), c.cost_usd))
        .collect();
    let expected = [
        ("ok", Some(priced(&unasked, DEFAULT_IN, DEFAULT_OUT))),
        ("ok", Some(cost(&asked))),
        ("ok", Some(0.0)),
        ("free_per_min", None),
        ("server_500", None),
        ("truncated", None),
        ("stall", Some(priced(&stalled, DEFAULT_IN, DEFAULT_OUT))),
    ];
    assert_eq!(logged.len(), expected.len(), "{logged:?}");
    for (got, want) in logged.iter().zip(expected) {
        assert_eq!(got.0, want.0);
        match (got.1, want.1) {
            (Some(g), Some(w)) => assert!(close(g, w), "{got:?} vs {want:?}"),
            (g, w) => assert_eq!(g, w, "{got:?}"),
        }
    }
    sim.shutdown().await;
}
