//! Non-streaming chat: body shape, directives, validation, paths, latency and the call log.

use crate::common;

use std::time::{Duration, Instant};

use common::*;
use serde_json::{Value, json};
use sim::SimConfig;

fn tools() -> Value {
    json!([
        {"type": "function", "function": {"name": "search", "parameters": {"type": "object"}}},
        {"type": "function", "function": {"name": "fetch"}}
    ])
}

#[tokio::test]
async fn a_completion_has_the_documented_shape() {
    let sim = start(SimConfig::default()).await;
    let client = client();
    let (status, headers, text) = chat(
        &client,
        &sim,
        KEY,
        &asking_cost(body(FREE, "hello  there [[tools:0]]", false)),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(header(&headers, "content-type"), Some("application/json"));
    let v = parse(&text);

    let id = v["id"].as_str().expect("id");
    assert_eq!(header(&headers, "x-generation-id"), Some(id));
    let parts: Vec<&str> = id.splitn(3, '-').collect();
    assert_eq!(parts[0], "gen");
    assert_eq!(
        parts[1],
        v["created"].to_string(),
        "id carries the creation second"
    );
    assert!(parts[2].len() == 20 && parts[2].chars().all(|c| c.is_ascii_alphanumeric()));

    assert_eq!(v["object"], json!("chat.completion"));
    assert_eq!(v["model"], json!(FREE));
    assert!(v["provider"].is_string());
    assert_eq!(
        v["choices"],
        json!([{
            "index": 0,
            "logprobs": null,
            "finish_reason": "stop",
            "native_finish_reason": "stop",
            "message": {"role": "assistant", "content": "Echo: hello there", "refusal": null}
        }])
    );
    let u = &v["usage"];
    assert_eq!(u["completion_tokens"], json!(3));
    // "hello  there [[tools:0]]" is 24 characters: 6 tokens.
    assert_eq!(u["prompt_tokens"], json!(6));
    assert_eq!(u["total_tokens"], json!(9));
    assert_eq!(u["is_byok"], json!(false));
    assert!(
        text.contains(r#""cost":0,"#),
        ":free models cost exactly 0: {text}"
    );

    let (_, _, paid) = chat(&client, &sim, KEY, &asking_cost(body(PAID, "hello", false))).await;
    assert!(
        parse(&paid)["usage"]["cost"]
            .as_f64()
            .is_some_and(|c| c > 0.0)
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn tool_directives_drive_a_multi_step_run() {
    let sim = start(SimConfig::default()).await;
    let client = client();
    let mut messages = user("Find Joyce titles [[tools:2]] [[answer:Ulysses, Dubliners]]");
    let mut seen_ids = Vec::new();
    for step in 1..=2 {
        let req = json!({"model": PAID, "messages": messages, "tools": tools()});
        let (status, _, text) = chat(&client, &sim, KEY, &req).await;
        assert_eq!(status, 200);
        let v = parse(&text);
        let choice = &v["choices"][0];
        assert_eq!(choice["finish_reason"], json!("tool_calls"));
        assert_eq!(choice["message"]["content"], Value::Null);
        let calls = choice["message"]["tool_calls"]
            .as_array()
            .expect("tool_calls");
        assert_eq!(calls.len(), 1);
        let call = &calls[0];
        assert_eq!(call["type"], json!("function"));
        assert_eq!(call["index"], json!(0));
        assert_eq!(
            call["function"]["name"],
            json!("search"),
            "the first tool by default"
        );
        assert_eq!(
            call["function"]["arguments"],
            json!(format!("{{\"step\":{step}}}"))
        );
        let id = call["id"].as_str().expect("call id").to_owned();
        assert!(id.starts_with("call_") && !seen_ids.contains(&id));
        seen_ids.push(id.clone());

        let list = messages.as_array_mut().expect("messages");
        list.push(choice["message"].clone());
        list.push(json!({"role": "tool", "tool_call_id": id, "content": "result"}));
    }
    let req = json!({"model": PAID, "messages": messages, "tools": tools()});
    let (_, _, text) = chat(&client, &sim, KEY, &req).await;
    let v = parse(&text);
    assert_eq!(v["choices"][0]["finish_reason"], json!("stop"));
    assert_eq!(
        v["choices"][0]["message"]["content"],
        json!("Ulysses, Dubliners")
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn parallel_and_named_tool_directives() {
    let sim = start(SimConfig::default()).await;
    let client = client();
    let req = json!({
        "model": PAID,
        "messages": user("go [[tools:1]] [[parallel:3]] [[tool:fetch]]"),
        "tools": tools()
    });
    let (_, _, text) = chat(&client, &sim, KEY, &req).await;
    let v = parse(&text);
    let calls = v["choices"][0]["message"]["tool_calls"]
        .as_array()
        .expect("calls")
        .clone();
    let summary: Vec<(Value, Value, Value)> = calls
        .iter()
        .map(|c| {
            (
                c["index"].clone(),
                c["function"]["name"].clone(),
                c["function"]["arguments"].clone(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [0, 1, 2]
            .map(|i| (
                json!(i),
                json!("fetch"),
                json!(format!("{{\"step\":{}}}", i + 1))
            ))
            .to_vec()
    );

    // Without tools in the request and without [[tool:…]], there is nothing to call.
    let (_, _, text) = chat(&client, &sim, KEY, &body(PAID, "go [[tools:1]]", false)).await;
    assert_eq!(
        parse(&text)["choices"][0]["message"]["content"],
        json!("Echo: go")
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn openrouter_free_names_the_model_that_served() {
    let sim = start(SimConfig::default()).await;
    let client = client();
    let (_, _, text) = chat(&client, &sim, KEY, &body("openrouter/free", "hi", false)).await;
    let model = parse(&text)["model"].as_str().expect("model").to_owned();
    assert!(
        model.ends_with(":free") && model != "openrouter/free",
        "{model}"
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn missing_auth_and_bad_bodies_are_refused_in_openrouter_envelopes() {
    let sim = start(SimConfig::default()).await;
    let client = client();
    let url = chat_url(&sim);

    let res = post(&client, &url, None, &body(FREE, "hi", false)).await;
    assert_eq!(res.status().as_u16(), 401);
    assert_eq!(
        parse(&res.text().await.expect("body")),
        json!({"error": {"code": 401, "message": "No auth credentials found"}})
    );
    let res = client
        .post(&url)
        .header("authorization", "Basic abc")
        .body(body(FREE, "hi", false).to_string())
        .send()
        .await
        .expect("sent");
    assert_eq!(res.status().as_u16(), 401, "only bearer keys count");

    let cases: [(&str, &str); 4] = [
        ("{not json", "Invalid JSON in request body"),
        (
            r#"{"messages":[{"role":"user","content":"x"}]}"#,
            "No model specified",
        ),
        (r#"{"model":"m","messages":[]}"#, "Input required"),
        (
            r#"{"model":"m","messages":"nope"}"#,
            "Invalid JSON in request body",
        ),
    ];
    for (raw, expected) in cases {
        let res = client
            .post(&url)
            .bearer_auth(KEY)
            .body(raw)
            .send()
            .await
            .expect("sent");
        assert_eq!(res.status().as_u16(), 400, "{raw}");
        let v = parse(&res.text().await.expect("body"));
        assert_eq!(v["error"]["code"], json!(400));
        let message = v["error"]["message"].as_str().expect("message");
        assert!(message.starts_with(expected), "{raw}: {message}");
        assert!(
            v["user_id"]
                .as_str()
                .is_some_and(|u| u.starts_with("user_"))
        );
    }
    let variants: Vec<(u16, String)> = sim
        .calls()
        .into_iter()
        .map(|c| (c.status, c.variant))
        .collect();
    assert_eq!(variants.len(), 6);
    assert_eq!(variants[0], (401, "missing_auth".to_owned()));
    assert!(
        variants[2..]
            .iter()
            .all(|v| *v == (400, "invalid_request".to_owned()))
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn groq_and_openai_style_paths_reach_the_same_handler() {
    let sim = start(SimConfig::default()).await;
    let client = client();
    for path in ["openai/v1/chat/completions", "v1/chat/completions"] {
        let url = format!("http://{}/{path}", sim.addr);
        let res = post(&client, &url, Some(KEY), &body(PAID, "hi", false)).await;
        assert_eq!(res.status().as_u16(), 200, "{path}");
        let v = parse(&res.text().await.expect("body"));
        assert_eq!(v["choices"][0]["message"]["content"], json!("Echo: hi"));
    }
    let res = client
        .get(format!("http://{}/nowhere", sim.addr))
        .send()
        .await
        .expect("sent");
    assert_eq!(res.status().as_u16(), 404);
    sim.shutdown().await;
}

#[tokio::test]
async fn latency_delays_the_response_headers() {
    let sim = start(SimConfig {
        latency_ms: 300,
        ..SimConfig::default()
    })
    .await;
    let client = client();
    let started = Instant::now();
    let res = post(
        &client,
        &chat_url(&sim),
        Some(KEY),
        &body(PAID, "hi", false),
    )
    .await;
    assert_eq!(res.status().as_u16(), 200);
    assert!(
        started.elapsed() >= Duration::from_millis(300),
        "{:?}",
        started.elapsed()
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn the_call_log_records_every_chat_request() {
    let sim = start(SimConfig {
        rpm: 1,
        ..SimConfig::default()
    })
    .await;
    let t0 = fresh_day(&sim);
    let client = client();
    chat(&client, &sim, KEY, &body(FREE, "a", false)).await;
    chat(&client, &sim, KEY, &body(FREE, "b", true)).await;
    inject(&client, &sim, json!({"kind": "server_500"})).await;
    chat(&client, &sim, OTHER_KEY, &body(PAID, "c", true)).await;
    chat(&client, &sim, OTHER_KEY, &body(PAID, "d", false)).await;

    let calls = sim.calls();
    let got: Vec<(&str, &str, u16, &str, bool)> = calls
        .iter()
        .map(|c| {
            (
                c.model.as_str(),
                c.key.as_str(),
                c.status,
                c.variant.as_str(),
                c.stream,
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            (FREE, KEY, 200, "ok", false),
            (FREE, KEY, 429, "free_per_min", true),
            (PAID, OTHER_KEY, 500, "server_500", true),
            (PAID, OTHER_KEY, 200, "ok", false),
        ]
    );
    assert!(calls.iter().all(|c| c.t_ms >= t0), "t_ms is sim time");

    let res = client
        .get(control_url(
            &sim,
            &format!("calls?since_ms={}", calls[2].t_ms),
        ))
        .send()
        .await
        .expect("calls");
    let over_http: Vec<sim::CallRecord> =
        serde_json::from_str(&res.text().await.expect("body")).expect("CallRecord JSON");
    assert_eq!(
        over_http,
        calls
            .iter()
            .filter(|c| c.t_ms >= calls[2].t_ms)
            .cloned()
            .collect::<Vec<_>>()
    );
    sim.shutdown().await;
}
