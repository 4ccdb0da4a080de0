//! SSE streaming: framing, keep-alive comments, usage layouts, tool calls, mid-stream errors,
//! truncation, stalls and pacing.

use crate::common;

use std::time::Duration;

use common::*;
use serde_json::{Value, json};
use sim::SimConfig;

async fn stream_text(client: &reqwest::Client, sim: &sim::SimHandle, req: &Value) -> String {
    let (status, headers, text) = chat(client, sim, KEY, req).await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(header(&headers, "content-type"), Some("text/event-stream"));
    text
}

fn assert_chunk_envelope(chunks: &[Value], model: &str) {
    let id = chunks[0]["id"].as_str().expect("id");
    for c in chunks {
        assert_eq!(c["id"], json!(id), "one id per stream");
        assert_eq!(c["object"], json!("chat.completion.chunk"));
        assert!(c["created"].is_u64());
        assert_eq!(c["model"], json!(model));
        assert!(c["provider"].is_string());
    }
}

#[tokio::test]
async fn a_text_stream_has_comments_chunks_usage_chunk_and_done() {
    let sim = start(SimConfig {
        keepalive_comments: 3,
        ..SimConfig::default()
    })
    .await;
    let client = client();
    let text = stream_text(
        &client,
        &sim,
        &asking_cost(body(FREE, "the quick brown fox", true)),
    )
    .await;
    let events = sse_events(&text);

    assert_eq!(
        events[..3],
        vec![Event::Comment("OPENROUTER PROCESSING".into()); 3][..],
        "keep-alive comments come first"
    );
    assert!(matches!(&events[3], Event::Data(_)));
    assert_eq!(events.last(), Some(&Event::Data("[DONE]".into())));
    assert!(
        !events[3..].iter().any(|e| matches!(e, Event::Comment(_))),
        "comments only before the first chunk"
    );

    let chunks = chunks(&events);
    assert_chunk_envelope(&chunks, FREE);
    assert_eq!(
        chunks[0]["choices"][0]["delta"],
        json!({"role": "assistant", "content": ""})
    );
    assert_eq!(streamed_text(&chunks), "Echo: the quick brown fox");
    // One content chunk per word, between the role chunk and the two closing chunks.
    assert_eq!(chunks.len(), 1 + 5 + 2);

    let (finish, usage) = (&chunks[chunks.len() - 2], &chunks[chunks.len() - 1]);
    for c in &chunks[..chunks.len() - 2] {
        assert_eq!(c["choices"][0]["finish_reason"], Value::Null);
    }
    assert_eq!(finish["choices"][0]["finish_reason"], json!("stop"));
    assert_eq!(finish["choices"][0]["native_finish_reason"], json!("stop"));
    assert!(finish.get("usage").is_none());
    assert_eq!(
        usage["choices"],
        json!([]),
        "layout (a): usage on a choices:[] chunk"
    );
    assert_eq!(usage["usage"]["completion_tokens"], json!(5));
    assert_eq!(usage["usage"]["cost"], json!(0));
    sim.shutdown().await;
}

#[tokio::test]
async fn usage_layout_b_puts_usage_on_a_second_finish_chunk() {
    let sim = start(SimConfig {
        keepalive_comments: 0,
        ..SimConfig::default()
    })
    .await;
    let client = client();
    inject(&client, &sim, json!({"kind": "usage_layout_b"})).await;
    let text = stream_text(&client, &sim, &body(PAID, "hi", true)).await;
    let events = sse_events(&text);
    assert!(
        matches!(&events[0], Event::Data(_)),
        "no comments when configured to 0"
    );
    let chunks = chunks(&events);
    let n = chunks.len();
    let (first, second) = (&chunks[n - 2], &chunks[n - 1]);
    assert_eq!(first["choices"][0]["finish_reason"], json!("stop"));
    assert!(first.get("usage").is_none());
    assert_eq!(second["choices"][0]["finish_reason"], json!("stop"));
    assert_eq!(second["usage"]["total_tokens"], json!(3));
    assert_eq!(events.last(), Some(&Event::Data("[DONE]".into())));
    assert_eq!(sim.calls()[0].variant, "usage_layout_b");

    // The fault is spent: the next stream is layout (a) again.
    let text = stream_text(&client, &sim, &body(PAID, "hi", true)).await;
    assert_eq!(
        common::chunks(&sse_events(&text))
            .last()
            .map(|c| c["choices"].clone()),
        Some(json!([]))
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn a_streamed_tool_call_reassembles_into_name_and_arguments() {
    let sim = start(SimConfig::default()).await;
    let client = client();
    let req = json!({
        "model": PAID,
        "stream": true,
        "messages": [
            {"role": "user", "content": "look it up [[tools:2]] [[parallel:2]]"},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "call_a", "type": "function", "function": {"name": "lookup", "arguments": "{\"step\":1}"}}]},
            {"role": "tool", "tool_call_id": "call_a", "content": "found"}
        ],
        "tools": [{"type": "function", "function": {"name": "lookup"}}]
    });
    let text = stream_text(&client, &sim, &req).await;
    let chunks = chunks(&sse_events(&text));
    let calls = reassemble_tool_calls(&chunks);
    assert_eq!(calls.len(), 2);
    for (i, call) in calls.iter().enumerate() {
        assert_eq!(call.name, "lookup");
        assert!(call.id.starts_with("call_"));
        assert_eq!(call.arguments, format!("{{\"step\":{}}}", i + 2));
        assert!(
            call.deltas >= 3,
            "an opening delta and at least two argument fragments"
        );
    }

    let deltas: Vec<&Value> = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["tool_calls"].get(0))
        .collect();
    assert_eq!(deltas[0]["type"], json!("function"));
    assert_eq!(deltas[0]["function"]["arguments"], json!(""));
    for later in deltas.iter().filter(|d| d.get("id").is_none()) {
        let keys: Vec<&String> = later.as_object().expect("delta").keys().collect();
        assert_eq!(keys.len(), 2, "only index and function: {later}");
        assert_eq!(later["function"].as_object().map(|f| f.len()), Some(1));
    }
    let finish = &chunks[chunks.len() - 2];
    assert_eq!(finish["choices"][0]["finish_reason"], json!("tool_calls"));
    assert_eq!(
        finish["choices"][0]["native_finish_reason"],
        json!("tool_calls")
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn a_midstream_error_in_the_documented_layout_ends_with_done() {
    let sim = start(SimConfig::default()).await;
    let client = client();
    inject(
        &client,
        &sim,
        json!({"kind": "midstream_error", "code": 429, "after_chunks": 2}),
    )
    .await;
    let text = stream_text(&client, &sim, &body(FREE, "one two three four", true)).await;
    let events = sse_events(&text);
    assert_eq!(events.last(), Some(&Event::Data("[DONE]".into())));
    let chunks = chunks(&events);
    assert_eq!(
        streamed_text(&chunks),
        "Echo: one ",
        "two content chunks before the error"
    );
    let last = chunks.last().expect("error chunk");
    assert_eq!(
        last["error"],
        json!({"message": "Rate limit exceeded", "code": 429, "metadata": {"error_type": "rate_limit_exceeded"}})
    );
    assert_eq!(last["choices"][0]["finish_reason"], json!("error"));
    assert!(last.get("usage").is_none());
    assert!(
        chunks
            .iter()
            .all(|c| c["choices"][0]["finish_reason"] != json!("stop"))
    );
    assert_eq!(
        (sim.calls()[0].status, sim.calls()[0].variant.as_str()),
        (200, "midstream_error")
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn a_midstream_error_with_empty_choices_and_no_done() {
    let sim = start(SimConfig::default()).await;
    let client = client();
    inject(
        &client,
        &sim,
        json!({"kind": "midstream_error", "layout": "empty_choices", "code": "server_error", "done": false}),
    )
    .await;
    let text = stream_text(&client, &sim, &body(FREE, "one two", true)).await;
    let events = sse_events(&text);
    assert!(!events.contains(&Event::Data("[DONE]".into())));
    let last = chunks(&events).pop().expect("error chunk");
    assert_eq!(last["choices"], json!([]));
    assert_eq!(
        last["error"]["code"],
        json!("server_error"),
        "string codes exist too"
    );

    inject(
        &client,
        &sim,
        json!({"kind": "midstream_error", "provider_name": "Together"}),
    )
    .await;
    let text = stream_text(&client, &sim, &body(FREE, "one two", true)).await;
    let last = chunks(&sse_events(&text)).pop().expect("error chunk");
    assert_eq!(
        last["error"],
        json!({
            "message": "Provider returned error",
            "code": 502,
            "metadata": {"raw": "upstream connect error", "provider_name": "Together"}
        })
    );
    assert_eq!(last["choices"][0]["native_finish_reason"], json!("error"));
    sim.shutdown().await;
}

/// The v3 in-band shapes before any output: an `event: error` frame holding the error envelope,
/// and a data frame holding DashScope's bare throttle object; without streaming, each as the
/// whole 200 body.
#[tokio::test]
async fn midstream_errors_as_an_error_event_and_a_bare_code_object() {
    let sim = start(SimConfig::default()).await;
    let client = client();
    inject(
        &client,
        &sim,
        json!({"kind": "midstream_error", "layout": "event_error", "code": 429, "after_chunks": 0}),
    )
    .await;
    let text = stream_text(&client, &sim, &body(FREE, "one two", true)).await;
    let frame = "event: error\ndata: {\"error\":{\"message\":\"Rate limit exceeded\",\"code\":429,\"metadata\":{\"error_type\":\"rate_limit_exceeded\"}}}\n\n";
    assert!(
        text.ends_with(&format!("{frame}data: [DONE]\n\n")),
        "{text}"
    );
    assert!(!text.contains("Echo"), "no output before it: {text}");

    inject(
        &client,
        &sim,
        json!({"kind": "midstream_error", "layout": "top_level_code", "code": 429, "after_chunks": 0, "done": false}),
    )
    .await;
    let text = stream_text(&client, &sim, &body(FREE, "one two", true)).await;
    let last = chunks(&sse_events(&text)).pop().expect("the error frame");
    let id = last["request_id"]
        .as_str()
        .expect("a request id")
        .to_owned();
    assert_eq!(
        last,
        json!({"code": "Throttling.AllocationQuota", "message": "Free allocated quota exceeded.", "request_id": id})
    );

    for (layout, expected) in [
        ("event_error", json!("Rate limit exceeded")),
        ("top_level_code", json!("Free allocated quota exceeded.")),
    ] {
        inject(
            &client,
            &sim,
            json!({"kind": "midstream_error", "layout": layout, "code": 429}),
        )
        .await;
        let (status, _, text) = chat(&client, &sim, KEY, &body(FREE, "one", false)).await;
        let body = parse(&text);
        assert_eq!(status, 200);
        let message = body
            .get("error")
            .map_or(&body["message"], |e| &e["message"]);
        assert_eq!(message, &expected, "{layout}: {text}");
        assert!(body.get("choices").is_none(), "{layout}: {text}");
    }
    sim.shutdown().await;
}

#[tokio::test]
async fn a_truncated_stream_drops_the_connection_without_finish_or_done() {
    let sim = start(SimConfig::default()).await;
    let client = client();
    inject(
        &client,
        &sim,
        json!({"kind": "truncated", "after_chunks": 1}),
    )
    .await;
    let res = post(
        &client,
        &chat_url(&sim),
        Some(KEY),
        &body(FREE, "a b c d", true),
    )
    .await;
    assert_eq!(res.status().as_u16(), 200);
    let (pieces, error) = read_timed(res).await;
    assert!(error.is_some(), "the body ends in a transport error");
    let received: String = pieces.into_iter().map(|(_, p)| p).collect();
    assert!(received.contains(r#""content":"Echo: ""#));
    assert!(!received.contains(r#""content":"a ""#));
    assert!(!received.contains("finish_reason\":\"") && !received.contains("[DONE]"));
    sim.shutdown().await;
}

#[tokio::test]
async fn a_stall_pauses_the_stream_then_it_completes() {
    let sim = start(SimConfig::default()).await;
    let client = client();
    inject(
        &client,
        &sim,
        json!({"kind": "stall", "delay_ms": 400, "after_chunks": 1}),
    )
    .await;
    // Timed from the request, so a busy client reading late cannot hide the stall.
    let sent = std::time::Instant::now();
    let res = post(
        &client,
        &chat_url(&sim),
        Some(KEY),
        &body(FREE, "a b", true),
    )
    .await;
    let headers_after = sent.elapsed();
    let (pieces, error) = read_timed(res).await;
    assert!(error.is_none());
    let at = |needle: &str| {
        pieces
            .iter()
            .find(|(_, p)| p.contains(needle))
            .map(|(t, _)| *t)
            .unwrap_or_else(|| panic!("{needle} never arrived"))
    };
    assert!(
        at(r#""content":"Echo: ""#) <= at(r#""content":"a ""#),
        "in order"
    );
    let after = headers_after + at(r#""content":"a ""#);
    assert!(
        after >= Duration::from_millis(400),
        "the second chunk came {after:?} after the request"
    );
    let text: String = pieces.into_iter().map(|(_, p)| p).collect();
    assert_eq!(streamed_text(&chunks(&sse_events(&text))), "Echo: a b");
    sim.shutdown().await;
}

#[tokio::test]
async fn token_rate_paces_the_chunks() {
    let sim = start(SimConfig {
        token_rate: 20,
        ..SimConfig::default()
    })
    .await;
    let client = client();
    let res = post(
        &client,
        &chat_url(&sim),
        Some(KEY),
        &body(PAID, "1 2 3 4 5 6 7", true),
    )
    .await;
    let (pieces, _) = read_timed(res).await;
    let (first, last) = (pieces[0].0, pieces[pieces.len() - 1].0);
    // 8 content chunks at 20 per second: at least 400 ms between the first and last byte.
    assert!(
        last - first >= Duration::from_millis(400),
        "{:?}",
        last - first
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn a_malformed_stream_has_a_broken_event_then_done() {
    let sim = start(SimConfig::default()).await;
    let client = client();
    inject(&client, &sim, json!({"kind": "malformed_json"})).await;
    let text = stream_text(&client, &sim, &body(FREE, "hi", true)).await;
    let events = sse_events(&text);
    let data: Vec<&Event> = events
        .iter()
        .filter(|e| matches!(e, Event::Data(_)))
        .collect();
    assert_eq!(
        data,
        [
            &Event::Data(r#"{"id":"#.into()),
            &Event::Data("[DONE]".into())
        ]
    );
    sim.shutdown().await;
}
