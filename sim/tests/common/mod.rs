//! Helpers shared by the integration tests: start the simulator in-process, talk to it over
//! real HTTP with reqwest, and read SSE streams.
#![allow(dead_code)] // each test binary uses a different subset

use std::time::Duration;

use reqwest::header::HeaderMap;
use serde_json::{Value, json};
use sim::{SimConfig, SimHandle};

pub(crate) const KEY: &str =
    "sk-or-v1-0e6f44a47a05f1dad2ad7e88c4c4d6b77688915c778b58a5ed4b3f2fb1c96";
pub(crate) const OTHER_KEY: &str =
    "sk-or-v1-5a1c0ffee0ddba11deadbeef0123456789abcdef0123456789abcdef0011";
pub(crate) const FREE: &str = "meta-llama/llama-3.3-70b-instruct:free";
pub(crate) const FREE_2: &str = "qwen/qwen3-coder:free";
pub(crate) const PAID: &str = "openai/gpt-4o-mini";
pub(crate) const DAY_MS: u64 = 86_400_000;

pub(crate) async fn start(config: SimConfig) -> SimHandle {
    match sim::start(config, "127.0.0.1:0".parse().expect("literal address")).await {
        Ok(h) => h,
        Err(e) => panic!("sim did not start: {e}"),
    }
}

/// Moves the sim clock to one second after the next UTC midnight, so a test starts with a fresh
/// day and a fresh per-minute window and cannot straddle either.
pub(crate) fn fresh_day(sim: &SimHandle) -> u64 {
    let now = sim.advance_clock(0);
    sim.advance_clock(DAY_MS - now % DAY_MS + 1_000)
}

pub(crate) fn client() -> reqwest::Client {
    // reqwest's `rustls-no-provider` needs a process-wide provider even for plain http.
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("reqwest client")
}

pub(crate) fn user(text: &str) -> Value {
    json!([{"role": "user", "content": text}])
}

pub(crate) fn body(model: &str, text: &str, stream: bool) -> Value {
    json!({"model": model, "messages": user(text), "stream": stream})
}

/// `body` asking for OpenRouter's usage accounting (`"usage": {"include": true}`): the answer's
/// usage shows its cost.
pub(crate) fn asking_cost(mut body: Value) -> Value {
    body["usage"] = json!({"include": true});
    body
}

pub(crate) async fn post(
    client: &reqwest::Client,
    url: &str,
    key: Option<&str>,
    body: &Value,
) -> reqwest::Response {
    let mut req = client
        .post(url)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(body.to_string());
    if let Some(key) = key {
        req = req.bearer_auth(key);
    }
    req.send().await.expect("request sent")
}

pub(crate) fn chat_url(sim: &SimHandle) -> String {
    format!("{}/chat/completions", sim.base_url())
}

pub(crate) fn control_url(sim: &SimHandle, path: &str) -> String {
    format!("http://{}/_sim/{path}", sim.addr)
}

/// Milliseconds of a Go-style duration, as Groq and OpenAI write resets.
pub(crate) fn go_duration_ms(s: &str) -> u64 {
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

/// A `/_sim/…` request; returns the status and the JSON body.
pub(crate) async fn control(
    client: &reqwest::Client,
    sim: &sim::SimHandle,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let url = control_url(sim, path);
    let req = match method {
        "GET" => client.get(url),
        "POST" => client.post(url),
        _ => panic!("method {method}"),
    };
    let req = match body {
        Some(b) => req.body(b.to_string()),
        None => req,
    };
    let res = req.send().await.expect("control request");
    let status = res.status().as_u16();
    (status, parse(&res.text().await.expect("body")))
}

/// A chat request; returns status, headers and the body as text.
pub(crate) async fn chat(
    client: &reqwest::Client,
    sim: &SimHandle,
    key: &str,
    body: &Value,
) -> (u16, HeaderMap, String) {
    let res = post(client, &chat_url(sim), Some(key), body).await;
    let status = res.status().as_u16();
    let headers = res.headers().clone();
    (status, headers, res.text().await.expect("body read"))
}

pub(crate) fn parse(text: &str) -> Value {
    match serde_json::from_str(text) {
        Ok(v) => v,
        Err(e) => panic!("not JSON ({e}): {text}"),
    }
}

pub(crate) fn header<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// One SSE event.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Event {
    Comment(String),
    Data(String),
}

/// Splits an SSE body into events, asserting the framing of docs/providers.md §1.3: every event
/// is a single line (`data: …` or `: comment`) followed by a blank line.
pub(crate) fn sse_events(text: &str) -> Vec<Event> {
    assert!(
        text.ends_with("\n\n"),
        "stream must end with a blank line: {text:?}"
    );
    text[..text.len() - 2]
        .split("\n\n")
        .map(|event| {
            assert!(
                !event.contains('\n'),
                "event spans several lines: {event:?}"
            );
            if let Some(data) = event.strip_prefix("data: ") {
                Event::Data(data.to_owned())
            } else if let Some(comment) = event.strip_prefix(':') {
                Event::Comment(comment.trim_start().to_owned())
            } else {
                panic!("not an SSE event: {event:?}")
            }
        })
        .collect()
}

/// The JSON chunks of a stream (everything but comments and `[DONE]`).
pub(crate) fn chunks(events: &[Event]) -> Vec<Value> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::Data(d) if d != "[DONE]" => Some(parse(d)),
            _ => None,
        })
        .collect()
}

/// Concatenated `delta.content` of all chunks.
pub(crate) fn streamed_text(chunks: &[Value]) -> String {
    chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect()
}

/// A tool call rebuilt from its stream deltas.
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct Reassembled {
    pub id: String,
    pub name: String,
    pub arguments: String,
    pub deltas: usize,
}

/// Rebuilds tool calls from `delta.tool_calls`, keyed by `index`, as an OpenAI client does.
pub(crate) fn reassemble_tool_calls(chunks: &[Value]) -> Vec<Reassembled> {
    let mut calls: Vec<Reassembled> = Vec::new();
    for chunk in chunks {
        let Some(deltas) = chunk["choices"][0]["delta"]["tool_calls"].as_array() else {
            continue;
        };
        for d in deltas {
            let index = d["index"].as_u64().expect("tool delta index") as usize;
            if calls.len() <= index {
                calls.resize(index + 1, Reassembled::default());
            }
            let call = &mut calls[index];
            call.deltas += 1;
            if let Some(id) = d["id"].as_str() {
                call.id.push_str(id);
            }
            if let Some(name) = d["function"]["name"].as_str() {
                call.name.push_str(name);
            }
            if let Some(args) = d["function"]["arguments"].as_str() {
                call.arguments.push_str(args);
            }
        }
    }
    calls
}

/// Reads a streamed body chunk by chunk, noting when each piece arrived; stops at the end of
/// the body or at its first error (returned as the second value).
pub(crate) async fn read_timed(
    res: reqwest::Response,
) -> (Vec<(Duration, String)>, Option<reqwest::Error>) {
    use futures_util::StreamExt;
    let start = std::time::Instant::now();
    let mut pieces = Vec::new();
    let mut body = res.bytes_stream();
    while let Some(item) = body.next().await {
        match item {
            Ok(bytes) => pieces.push((
                start.elapsed(),
                String::from_utf8_lossy(&bytes).into_owned(),
            )),
            Err(e) => return (pieces, Some(e)),
        }
    }
    (pieces, None)
}

pub(crate) async fn inject(client: &reqwest::Client, sim: &SimHandle, spec: Value) -> u64 {
    let res = post(client, &control_url(sim, "faults"), None, &spec).await;
    assert_eq!(res.status().as_u16(), 201, "fault {spec} refused");
    let v = parse(&res.text().await.expect("fault id"));
    v["id"].as_u64().expect("numeric id")
}

pub(crate) async fn key_info(client: &reqwest::Client, sim: &SimHandle, key: &str) -> Value {
    let res = client
        .get(format!("{}/key", sim.base_url()))
        .bearer_auth(key)
        .send()
        .await
        .expect("key request");
    assert_eq!(res.status().as_u16(), 200);
    parse(&res.text().await.expect("key JSON"))
}
