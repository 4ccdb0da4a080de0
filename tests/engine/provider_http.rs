//! The provider client over real HTTP on loopback, against peers that misbehave on purpose.
//!
//! A well-behaved simulator cannot stall before its headers, cut a chunked body in half or lie
//! about its content type on demand, so these tests run a tiny raw HTTP/1.1 server: it reads one
//! request, hands it to the test, and plays a script of byte writes, waits and hang-ups. Every
//! failure must come back as a classified `CallError` within the call's timeouts. The
//! simulator shows how calls share connections over HTTP/2 and not over HTTP/1.1.

use freeway::chat::{Message, ToolCall, ToolSpec, Usage};
use freeway::provider::{
    ApiKey, BODY_CAP, CALLS_PER_CONNECTION, CallError, ChatProvider, ChatRequest, Completion,
    Deltas, ERROR_BODY_CAP, Http2, HttpProvider, Target, Timeouts, Transport, TransportError,
};
use serde_json::{Value, json};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::time::Instant;

const KEY: &str = "sk-or-v1-test-key";

/// One step of what the raw server does after reading the request.
enum Act {
    Send(Vec<u8>),
    /// Wait until the test says so (no sleeps: the test reacts to what it received).
    Await(oneshot::Receiver<()>),
    /// Send nothing more and keep the connection open until the client gives up.
    Stall,
    /// Send these bytes again and again, `every` apart, until the client gives up.
    Trickle {
        bytes: Vec<u8>,
        every: Duration,
    },
}

/// The request as the raw server read it.
struct Seen {
    head: String,
    body: Value,
}

impl Seen {
    fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().skip(1).find_map(|line| {
            let (n, v) = line.split_once(':')?;
            n.eq_ignore_ascii_case(name).then(|| v.trim())
        })
    }
}

/// Starts a one-connection raw server; returns its base URL and the request it will read.
async fn serve(script: Vec<Act>) -> (String, oneshot::Receiver<Seen>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base_url = format!("http://{}/api/v1", listener.local_addr().unwrap());
    let (seen_tx, seen_rx) = oneshot::channel();
    tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.unwrap();
        let seen = read_request(&mut socket).await;
        let _ = seen_tx.send(seen);
        for act in script {
            match act {
                Act::Send(bytes) => {
                    if socket.write_all(&bytes).await.is_err() {
                        return;
                    }
                    let _ = socket.flush().await;
                }
                Act::Await(signal) => {
                    let _ = signal.await;
                }
                Act::Stall => {
                    wait_for_hang_up(&mut socket).await;
                    return;
                }
                Act::Trickle { bytes, every } => loop {
                    if socket.write_all(&bytes).await.is_err() {
                        return;
                    }
                    tokio::time::sleep(every).await;
                },
            }
        }
        // Dropping the socket ends a close-delimited body, or cuts a longer one short.
    });
    (base_url, seen_rx)
}

async fn read_request(socket: &mut TcpStream) -> Seen {
    let mut buf = Vec::new();
    let head_end = loop {
        let mut chunk = [0u8; 4096];
        let n = socket.read(&mut chunk).await.unwrap();
        assert!(n > 0, "client closed before sending its request");
        buf.extend_from_slice(&chunk[..n]);
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
    };
    let head = String::from_utf8(buf[..head_end].to_vec()).unwrap();
    let length: usize = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-length:")
                .map(|v| v.trim().parse().unwrap())
        })
        .expect("the request has a Content-Length");
    while buf.len() < head_end + length {
        let mut chunk = [0u8; 4096];
        let n = socket.read(&mut chunk).await.unwrap();
        assert!(n > 0, "client closed mid-request");
        buf.extend_from_slice(&chunk[..n]);
    }
    let body = serde_json::from_slice(&buf[head_end..head_end + length]).unwrap();
    Seen { head, body }
}

async fn wait_for_hang_up(socket: &mut TcpStream) {
    let mut sink = [0u8; 1024];
    while matches!(socket.read(&mut sink).await, Ok(n) if n > 0) {}
}

/// A response head; without `Content-Length` the body ends when the server closes.
fn head(status: &str, headers: &[(&str, &str)]) -> Vec<u8> {
    let mut text = format!("HTTP/1.1 {status}\r\nConnection: close\r\n");
    for (name, value) in headers {
        text.push_str(&format!("{name}: {value}\r\n"));
    }
    text.push_str("\r\n");
    text.into_bytes()
}

fn json_response(status: &str, extra: &[(&str, &str)], body: &str) -> Vec<u8> {
    let length = body.len().to_string();
    let mut headers = vec![
        ("Content-Type", "application/json"),
        ("Content-Length", length.as_str()),
    ];
    headers.extend_from_slice(extra);
    let mut bytes = head(status, &headers);
    bytes.extend_from_slice(body.as_bytes());
    bytes
}

fn sse_head() -> Vec<u8> {
    head(
        "200 OK",
        &[
            ("Content-Type", "text/event-stream"),
            ("X-Generation-Id", "gen-1"),
        ],
    )
}

fn data(chunk: Value) -> Vec<u8> {
    format!("data: {chunk}\n\n").into_bytes()
}

fn text_chunk(text: &str) -> Vec<u8> {
    data(json!({"id": "gen-1", "model": "m", "provider": "P",
        "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": null}]}))
}

fn finish_chunk(reason: &str) -> Vec<u8> {
    data(
        json!({"id": "gen-1", "choices": [{"index": 0, "delta": {"content": ""}, "finish_reason": reason}]}),
    )
}

fn fast() -> Timeouts {
    Timeouts {
        connect: Duration::from_millis(200),
        first_byte: Duration::from_millis(300),
        idle: Duration::from_millis(300),
        total: Duration::from_secs(3),
    }
}

fn request(stream: bool) -> ChatRequest {
    ChatRequest {
        model: "meta-llama/llama-3.3-70b-instruct:free".into(),
        messages: vec![Message::system("be brief"), Message::user("hello")],
        tools: vec![],
        stream,
        max_tokens: None,
        ask_cost: false,
    }
}

fn target(base_url: &str) -> Target {
    Target {
        base_url: base_url.to_owned(),
        api_key: ApiKey::new(KEY),
    }
}

/// Makes one call with `timeouts`; returns its result, the text it relayed and how long it took.
async fn call_with(
    timeouts: Timeouts,
    base_url: &str,
    req: &ChatRequest,
) -> (Result<Completion, CallError>, String, Duration) {
    let provider = HttpProvider::new(timeouts).unwrap();
    let deltas = Deltas::default();
    let started = Instant::now();
    let result = provider.call(&target(base_url), req, &deltas).await;
    let elapsed = started.elapsed();
    (result, deltas.take().unwrap_or_default(), elapsed)
}

async fn call(
    base_url: &str,
    req: &ChatRequest,
) -> (Result<Completion, CallError>, String, Duration) {
    call_with(fast(), base_url, req).await
}

fn transport(result: Result<Completion, CallError>) -> TransportError {
    match result {
        Err(CallError::Transport(e)) => e,
        other => panic!("expected a transport error, got {other:?}"),
    }
}

#[tokio::test]
async fn request_carries_the_key_and_the_openai_shape() {
    let body =
        json!({"choices": [{"message": {"content": "ok"}, "finish_reason": "stop"}]}).to_string();
    let (url, seen) = serve(vec![Act::Send(json_response("200 OK", &[], &body))]).await;
    let req = ChatRequest {
        model: "qwen/qwen3-coder:free".into(),
        messages: vec![
            Message::user("find joyce"),
            Message::assistant(
                None,
                vec![ToolCall {
                    id: "call_1".into(),
                    name: "search".into(),
                    arguments: "{\"q\":\"joyce\"}".into(),
                    extra_content: None,
                }],
            ),
            Message::tool_result("call_1", "Ulysses"),
        ],
        tools: vec![ToolSpec {
            name: "search".into(),
            description: "Search books".into(),
            parameters: json!({"type": "object", "properties": {"q": {"type": "string"}}}),
            approval: Default::default(),
        }],
        stream: false,
        max_tokens: None,
        ask_cost: false,
    };
    let (result, _, _) = call(&url, &req).await;
    assert_eq!(result.unwrap().text, "ok");

    let seen = seen.await.unwrap();
    assert!(
        seen.head
            .starts_with("POST /api/v1/chat/completions HTTP/1.1\r\n"),
        "{}",
        seen.head
    );
    assert_eq!(
        seen.header("authorization"),
        Some(format!("Bearer {KEY}").as_str())
    );
    assert_eq!(seen.header("content-type"), Some("application/json"));
    assert_eq!(
        seen.body,
        json!({
            "model": "qwen/qwen3-coder:free",
            "messages": [
                {"role": "user", "content": "find joyce"},
                {"role": "assistant", "content": null, "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "search", "arguments": "{\"q\":\"joyce\"}"}}
                ]},
                {"role": "tool", "content": "Ulysses", "tool_call_id": "call_1"}
            ],
            "tools": [{"type": "function", "function": {
                "name": "search", "description": "Search books",
                "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}
            }}],
            "stream": false
        })
    );
}

#[tokio::test]
async fn non_streaming_success_with_tool_calls() {
    let body = json!({
        "id": "gen-1779334358-5uErgorPN1rJbPw8AVrM", "object": "chat.completion",
        "model": "qwen/qwen3.5-35b-a3b-20260224", "provider": "Parasail",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": null, "reasoning": "I should search",
            "tool_calls": [
                {"type": "function", "index": 0, "id": "call_a", "function": {"name": "search_recipes", "arguments": "{\"query\": \"pad thai\"}"}},
                {"type": "function", "index": 1, "id": "call_b", "function": {"name": "get_time", "arguments": ""}}
            ]
        }}],
        "usage": {"prompt_tokens": 1077, "completion_tokens": 66, "total_tokens": 1143, "cost": 0}
    })
    .to_string();
    let extra = [("x-ratelimit-remaining-requests", "14370")];
    let (url, _) = serve(vec![Act::Send(json_response("200 OK", &extra, &body))]).await;
    let (result, deltas, _) = call(&url, &request(false)).await;
    let c = result.unwrap();
    assert!(deltas.is_empty());
    assert_eq!(c.id.as_deref(), Some("gen-1779334358-5uErgorPN1rJbPw8AVrM"));
    assert_eq!(c.model.as_deref(), Some("qwen/qwen3.5-35b-a3b-20260224"));
    assert_eq!(c.provider_name.as_deref(), Some("Parasail"));
    assert_eq!(c.text, "");
    assert_eq!(c.finish_reason.as_deref(), Some("tool_calls"));
    assert_eq!(
        c.tool_calls,
        vec![
            ToolCall {
                id: "call_a".into(),
                name: "search_recipes".into(),
                arguments: "{\"query\": \"pad thai\"}".into(),
                extra_content: None,
            },
            ToolCall {
                id: "call_b".into(),
                name: "get_time".into(),
                arguments: String::new(),
                extra_content: None,
            },
        ]
    );
    assert_eq!(
        c.usage,
        Some(Usage {
            prompt_tokens: 1077,
            completion_tokens: 66,
            total_tokens: 1143
        })
    );
    assert_eq!(c.ratelimit_remaining, Some(14370));
}

#[tokio::test]
async fn streaming_text_forwards_deltas_in_order_as_they_arrive() {
    let (go_on, go_on_rx) = oneshot::channel();
    let mut first = sse_head();
    first.extend_from_slice(b": OPENROUTER PROCESSING\n\n: OPENROUTER PROCESSING\n\n");
    first.extend(text_chunk("Hel"));
    let mut rest = text_chunk("lo, ");
    rest.extend(text_chunk("world"));
    rest.extend(finish_chunk("stop"));
    rest.extend(data(json!({"id": "gen-1", "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 3, "total_tokens": 6}})));
    rest.extend_from_slice(b"data: [DONE]\n\n");
    let (url, _) = serve(vec![
        Act::Send(first),
        Act::Await(go_on_rx),
        Act::Send(rest),
    ])
    .await;

    let provider = HttpProvider::new(fast()).unwrap();
    let deltas = Deltas::default();
    let req = request(true);
    let t = target(&url);
    let calling = provider.call(&t, &req, &deltas);
    // The server holds the rest of the stream until the first delta has reached us: the text is
    // forwarded while the stream is still open, not at its end.
    let listening = async {
        let first = deltas.next().await;
        let _ = go_on.send(());
        first
    };
    let (result, first) = tokio::join!(calling, listening);
    assert_eq!(first, "Hel");
    // What arrived after it waits, in order, for the next take.
    assert_eq!(deltas.take().as_deref(), Some("lo, world"));
    let c = result.unwrap();
    assert_eq!(c.text, "Hello, world");
    assert_eq!(c.finish_reason.as_deref(), Some("stop"));
    assert_eq!(c.usage.map(|u| u.total_tokens), Some(6));
    assert_eq!(c.provider_name.as_deref(), Some("P"));
}

#[tokio::test]
async fn streamed_tool_call_with_fragmented_arguments() {
    let mut stream = Vec::new();
    stream.extend(data(json!({"id": "gen-t", "choices": [{"index": 0, "delta": {"role": "assistant", "content": null,
        "tool_calls": [{"index": 0, "id": "toolu_1", "type": "function", "function": {"name": "search_gutenberg_books", "arguments": ""}}]},
        "finish_reason": null}]})));
    for fragment in ["{\"search_", "terms\": [\"Ja", "mes\", \"Joyce\"", "]}"] {
        stream.extend(data(json!({"id": "gen-t", "choices": [{"index": 0,
            "delta": {"tool_calls": [{"index": 0, "function": {"arguments": fragment}}]}, "finish_reason": null}]})));
    }
    stream.extend(finish_chunk("tool_calls"));
    // Usage layout (b): attached to a second finish chunk.
    stream.extend(data(
        json!({"id": "gen-t", "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 20, "total_tokens": 30}}),
    ));
    stream.extend_from_slice(b"data: [DONE]\n\n");
    // Written in odd-sized pieces so lines and JSON are split across TCP segments.
    let mut script = vec![Act::Send(sse_head())];
    script.extend(stream.chunks(37).map(|piece| Act::Send(piece.to_vec())));
    let (url, _) = serve(script).await;

    let (result, deltas, _) = call(&url, &request(true)).await;
    let c = result.unwrap();
    assert!(deltas.is_empty());
    assert_eq!(
        c.tool_calls,
        vec![ToolCall {
            id: "toolu_1".into(),
            name: "search_gutenberg_books".into(),
            arguments: "{\"search_terms\": [\"James\", \"Joyce\"]}".into(),
            extra_content: None,
        }]
    );
    assert_eq!(c.finish_reason.as_deref(), Some("tool_calls"));
    assert_eq!(c.usage.map(|u| u.total_tokens), Some(30));
}

#[tokio::test]
async fn rate_limited_429_keeps_headers_and_body() {
    let body = r#"{"error":{"message":"Rate limit exceeded: free-models-per-min. ","code":429,"metadata":{"headers":{"X-RateLimit-Limit":"20","X-RateLimit-Remaining":"0","X-RateLimit-Reset":"1785056700000"},"provider_name":null,"limit_source":"openrouter_free_tier_per_minute"}},"user_id":"user_X"}"#;
    let extra = [
        ("X-RateLimit-Limit", "20"),
        ("X-RateLimit-Remaining", "0"),
        ("X-RateLimit-Reset", "1785056700000"),
    ];
    let (url, _) = serve(vec![Act::Send(json_response(
        "429 Too Many Requests",
        &extra,
        body,
    ))])
    .await;
    let (result, _, _) = call(&url, &request(true)).await;
    let Err(CallError::Http {
        status,
        headers,
        body: got,
    }) = result
    else {
        panic!("{result:?}")
    };
    assert_eq!(status, 429);
    assert_eq!(headers.get("X-RateLimit-Limit"), Some("20"));
    assert_eq!(headers.get("x-ratelimit-remaining"), Some("0"));
    assert_eq!(headers.get("X-RateLimit-Reset"), Some("1785056700000"));
    assert_eq!(headers.get("content-type"), Some("application/json"));
    assert_eq!(&got[..], body.as_bytes());
}

#[tokio::test]
async fn error_body_is_capped() {
    let body = "x".repeat(ERROR_BODY_CAP + 4096);
    let (url, _) = serve(vec![Act::Send(json_response(
        "503 Service Unavailable",
        &[],
        &body,
    ))])
    .await;
    let (result, _, _) = call(&url, &request(false)).await;
    let Err(CallError::Http { status, body, .. }) = result else {
        panic!()
    };
    assert_eq!(status, 503);
    assert_eq!(body.len(), ERROR_BODY_CAP);
}

#[tokio::test]
async fn error_body_that_stalls_still_reports_the_status() {
    let mut bytes = head(
        "502 Bad Gateway",
        &[
            ("Content-Type", "application/json"),
            ("Content-Length", "1000"),
        ],
    );
    bytes.extend_from_slice(b"{\"error\":");
    let (url, _) = serve(vec![Act::Send(bytes), Act::Stall]).await;
    let (result, _, elapsed) = call(&url, &request(false)).await;
    let Err(CallError::Http { status, body, .. }) = result else {
        panic!("{result:?}")
    };
    assert_eq!((status, &body[..]), (502, &b"{\"error\":"[..]));
    assert!(elapsed < Duration::from_secs(2), "{elapsed:?}");
}

#[tokio::test]
async fn redirect_is_answered_not_followed() {
    let bytes = json_response(
        "307 Temporary Redirect",
        &[("Location", "http://127.0.0.1:9/elsewhere")],
        "{}",
    );
    let (url, _) = serve(vec![Act::Send(bytes)]).await;
    let (result, _, _) = call(&url, &request(false)).await;
    assert!(
        matches!(result, Err(CallError::Http { status: 307, .. })),
        "{result:?}"
    );
}

#[tokio::test]
async fn first_byte_timeout_when_no_headers_come() {
    let (url, _) = serve(vec![Act::Stall]).await;
    let (result, _, elapsed) = call(&url, &request(true)).await;
    assert_eq!(transport(result), TransportError::FirstByteTimeout);
    // connect (200 ms) + first byte (300 ms) is the allowance.
    assert!(
        elapsed >= Duration::from_millis(300) && elapsed < Duration::from_secs(2),
        "{elapsed:?}"
    );
}

#[tokio::test]
async fn idle_timeout_when_the_stream_stalls() {
    let mut bytes = sse_head();
    bytes.extend(text_chunk("partial"));
    let (url, _) = serve(vec![Act::Send(bytes), Act::Stall]).await;
    let (result, deltas, elapsed) = call(&url, &request(true)).await;
    assert_eq!(transport(result), TransportError::IdleTimeout);
    assert_eq!(deltas, "partial");
    assert!(elapsed < Duration::from_secs(2), "{elapsed:?}");
}

#[tokio::test]
async fn total_timeout_when_keep_alives_never_end() {
    // A comment every 50 ms keeps the idle timer (300 ms) from ever firing.
    let (url, _) = serve(vec![
        Act::Send(sse_head()),
        Act::Trickle {
            bytes: b": OPENROUTER PROCESSING\n\n".to_vec(),
            every: Duration::from_millis(50),
        },
    ])
    .await;
    let timeouts = Timeouts {
        total: Duration::from_millis(700),
        ..fast()
    };
    let (result, _, elapsed) = call_with(timeouts, &url, &request(true)).await;
    assert_eq!(transport(result), TransportError::TotalTimeout);
    assert!(
        elapsed >= Duration::from_millis(700) && elapsed < Duration::from_secs(2),
        "{elapsed:?}"
    );
}

#[tokio::test]
async fn total_timeout_caps_the_wait_for_headers_too() {
    let (url, _) = serve(vec![Act::Stall]).await;
    let timeouts = Timeouts {
        total: Duration::from_millis(250),
        ..fast()
    };
    let (result, _, _) = call_with(timeouts, &url, &request(false)).await;
    assert_eq!(transport(result), TransportError::TotalTimeout);
}

#[tokio::test]
async fn stream_closed_before_it_finished_is_truncated() {
    let mut bytes = sse_head();
    bytes.extend(text_chunk("Once upon"));
    let (url, _) = serve(vec![Act::Send(bytes)]).await;
    let (result, deltas, _) = call(&url, &request(true)).await;
    assert_eq!(transport(result), TransportError::Truncated);
    assert_eq!(deltas, "Once upon");
}

#[tokio::test]
async fn chunked_stream_cut_mid_chunk_is_truncated() {
    let mut bytes = head(
        "200 OK",
        &[
            ("Content-Type", "text/event-stream"),
            ("Transfer-Encoding", "chunked"),
        ],
    );
    let chunk = text_chunk("Once");
    bytes.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
    bytes.extend_from_slice(&chunk);
    bytes.extend_from_slice(b"\r\n400\r\ndata: {\"choi");
    let (url, _) = serve(vec![Act::Send(bytes)]).await;
    let (result, _, _) = call(&url, &request(true)).await;
    assert_eq!(transport(result), TransportError::Truncated);
}

#[tokio::test]
async fn stream_closed_after_its_finish_reason_is_complete() {
    let mut bytes = sse_head();
    bytes.extend(text_chunk("Done."));
    bytes.extend(finish_chunk("stop"));
    let (url, _) = serve(vec![Act::Send(bytes)]).await;
    let (result, _, _) = call(&url, &request(true)).await;
    let c = result.unwrap();
    assert_eq!(
        (c.text.as_str(), c.finish_reason.as_deref()),
        ("Done.", Some("stop"))
    );
}

#[tokio::test]
async fn mid_stream_rate_limit_is_in_band_with_the_partial_text() {
    let mut bytes = sse_head();
    bytes.extend(text_chunk("Half an "));
    bytes.extend(data(json!({"id": "gen-1", "provider": "OpenAI",
        "error": {"code": 429, "message": "Rate limit exceeded", "metadata": {"error_type": "rate_limit_exceeded"}},
        "choices": [{"index": 0, "delta": {"content": ""}, "finish_reason": "error"}]})));
    // No [DONE]: the error ends the call on its own, and the server then stalls.
    let (url, _) = serve(vec![Act::Send(bytes), Act::Stall]).await;
    let (result, deltas, elapsed) = call(&url, &request(true)).await;
    let Err(CallError::InBand { error, partial }) = result else {
        panic!("{result:?}")
    };
    assert!(error.is_rate_limit());
    assert_eq!(error.code, Some(429));
    assert_eq!(partial, "Half an ");
    assert_eq!(deltas, "Half an ");
    assert!(
        elapsed < Duration::from_millis(300),
        "the error must not wait for a timeout: {elapsed:?}"
    );
}

#[tokio::test]
async fn non_streaming_200_with_an_error_is_in_band() {
    let body = r#"{"error":{"code":502,"message":"Provider returned error","metadata":{"raw":"upstream connect error","provider_name":"Together"}},"user_id":"user_X"}"#;
    let (url, _) = serve(vec![Act::Send(json_response("200 OK", &[], body))]).await;
    let (result, _, _) = call(&url, &request(false)).await;
    let Err(CallError::InBand { error, partial }) = result else {
        panic!("{result:?}")
    };
    assert_eq!(
        (error.code, error.message.as_str(), partial.as_str()),
        (Some(502), "Provider returned error", "")
    );
    assert_eq!(error.error["metadata"]["provider_name"], "Together");
}

#[tokio::test]
async fn json_answer_to_a_streaming_request_is_read_whole() {
    let body = r#"{"error":{"code":"server_error","message":"boom"}}"#;
    let (url, _) = serve(vec![Act::Send(json_response("200 OK", &[], body))]).await;
    let (result, _, _) = call(&url, &request(true)).await;
    let Err(CallError::InBand { error, .. }) = result else {
        panic!("{result:?}")
    };
    assert_eq!(error.code_text.as_deref(), Some("server_error"));
}

#[tokio::test]
async fn malformed_json_is_classified() {
    let mut bytes = sse_head();
    bytes.extend(text_chunk("ok"));
    bytes.extend_from_slice(b"data: {\"choices\":[{\"delta\":\n\n");
    let (url, _) = serve(vec![Act::Send(bytes), Act::Stall]).await;
    let (result, _, _) = call(&url, &request(true)).await;
    assert!(matches!(transport(result), TransportError::Malformed(_)));

    let (url, _) = serve(vec![Act::Send(json_response(
        "200 OK",
        &[],
        "{\"choices\": [tru",
    ))])
    .await;
    let (result, _, _) = call(&url, &request(false)).await;
    assert!(matches!(transport(result), TransportError::Malformed(_)));
}

#[tokio::test]
async fn wrong_content_type_is_malformed() {
    let html = "<html>Just a moment...</html>";
    let bytes = {
        let mut b = head(
            "200 OK",
            &[
                ("Content-Type", "text/html"),
                ("Content-Length", &html.len().to_string()),
            ],
        );
        b.extend_from_slice(html.as_bytes());
        b
    };
    for stream in [true, false] {
        let (url, _) = serve(vec![Act::Send(bytes.clone())]).await;
        let (result, _, _) = call(&url, &request(stream)).await;
        let TransportError::Malformed(why) = transport(result) else {
            panic!()
        };
        assert!(why.contains("text/html"), "{why}");
    }
    // An event stream is not an answer to a non-streaming request.
    let mut sse = sse_head();
    sse.extend(finish_chunk("stop"));
    let (url, _) = serve(vec![Act::Send(sse)]).await;
    let (result, _, _) = call(&url, &request(false)).await;
    assert!(matches!(transport(result), TransportError::Malformed(_)));
}

#[tokio::test]
async fn oversized_bodies_are_too_large() {
    // Declared too large: refused before reading.
    let declared = head(
        "200 OK",
        &[
            ("Content-Type", "application/json"),
            ("Content-Length", &(BODY_CAP + 1).to_string()),
        ],
    );
    let (url, _) = serve(vec![Act::Send(declared), Act::Stall]).await;
    let (result, _, _) = call(&url, &request(false)).await;
    assert_eq!(transport(result), TransportError::TooLarge);

    // A stream that keeps growing: keep-alive comments past the cap.
    let mut grow = sse_head();
    grow.extend(text_chunk("a"));
    let comment = format!(": {}\n\n", "x".repeat(64 * 1024));
    let mut script = vec![Act::Send(grow)];
    script
        .extend((0..BODY_CAP / comment.len() + 2).map(|_| Act::Send(comment.clone().into_bytes())));
    script.push(Act::Stall);
    let (url, _) = serve(script).await;
    let (result, _, _) = call(&url, &request(true)).await;
    assert_eq!(transport(result), TransportError::TooLarge);
}

#[tokio::test]
async fn connection_refused_is_a_connect_error() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let (result, _, elapsed) = call(&format!("http://{addr}/api/v1"), &request(true)).await;
    assert!(matches!(transport(result), TransportError::Connect(_)));
    assert!(elapsed < Duration::from_secs(1), "{elapsed:?}");
}

#[tokio::test]
async fn the_key_never_prints() {
    let t = target("http://127.0.0.1:1/api/v1");
    assert!(!format!("{t:?}").contains(KEY));
    let (result, _, _) = call("http://127.0.0.1:1/api/v1", &request(false)).await;
    assert!(!format!("{:?} {}", result, result.as_ref().unwrap_err()).contains(KEY));
}

// ---- Against the simulator: the same client, the sim's idea of the real wire shapes. ----

async fn start_sim() -> sim::SimHandle {
    start_sim_with(sim::SimConfig::default()).await
}

async fn start_sim_with(config: sim::SimConfig) -> sim::SimHandle {
    sim::start(config, "127.0.0.1:0".parse().unwrap())
        .await
        .unwrap()
}

fn search_tool() -> ToolSpec {
    ToolSpec {
        name: "search".into(),
        description: "Search books".into(),
        parameters: json!({"type": "object", "properties": {"step": {"type": "integer"}}}),
        approval: Default::default(),
    }
}

#[tokio::test]
async fn sim_streamed_tool_call_run() {
    let sim = start_sim().await;
    let mut req = ChatRequest {
        model: "meta-llama/llama-3.3-70b-instruct:free".into(),
        messages: vec![Message::user(
            "[[tools:1]] [[answer:Ulysses and Dubliners.]] books by Joyce?",
        )],
        tools: vec![search_tool()],
        stream: true,
        max_tokens: None,
        ask_cost: false,
    };

    let (result, deltas, _) = call(&sim.base_url(), &req).await;
    let step1 = result.unwrap();
    assert!(deltas.is_empty(), "{deltas:?}");
    assert_eq!(step1.finish_reason.as_deref(), Some("tool_calls"));
    assert_eq!(step1.tool_calls.len(), 1);
    let tool_call = step1.tool_calls[0].clone();
    assert_eq!(tool_call.name, "search");
    assert!(!tool_call.id.is_empty());
    assert_eq!(
        serde_json::from_str::<Value>(&tool_call.arguments).unwrap(),
        json!({"step": 1})
    );
    assert!(step1.usage.is_some());

    req.messages
        .push(Message::assistant(None, vec![tool_call.clone()]));
    req.messages
        .push(Message::tool_result(tool_call.id, "Ulysses; Dubliners"));
    let (result, deltas, _) = call(&sim.base_url(), &req).await;
    let step2 = result.unwrap();
    assert_eq!(step2.text, "Ulysses and Dubliners.");
    assert_eq!(deltas, step2.text);
    assert_eq!(step2.finish_reason.as_deref(), Some("stop"));
    assert!(step2.tool_calls.is_empty());

    let calls = sim.calls();
    assert_eq!(
        calls.len(),
        2,
        "one HTTP call per step, no retries: {calls:?}"
    );
    assert!(
        calls
            .iter()
            .all(|c| c.status == 200 && c.key == KEY && c.stream)
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn sim_mid_stream_errors_in_both_layouts() {
    let sim = start_sim().await;
    let req = ChatRequest {
        messages: vec![Message::user("[[answer:one two three four five]] go")],
        ..request(true)
    };
    let cases = [
        (
            sim::MidstreamLayout::FinishChoice,
            sim::ErrorCode::Number(429),
            true,
        ),
        (
            sim::MidstreamLayout::EmptyChoices,
            sim::ErrorCode::Text("server_error".into()),
            false,
        ),
    ];
    for (layout, code, done) in cases {
        sim.inject(sim::FaultSpec {
            layout: Some(layout),
            code: Some(code.clone()),
            after_chunks: Some(2),
            done: Some(done),
            ..sim::FaultSpec::new(sim::FaultKind::MidstreamError)
        });
        let (result, deltas, _) = call(&sim.base_url(), &req).await;
        let Err(CallError::InBand { error, partial }) = result else {
            panic!("{layout:?}: {result:?}")
        };
        assert!(!partial.is_empty(), "{layout:?}");
        assert_eq!(deltas, partial, "{layout:?}");
        match code {
            sim::ErrorCode::Number(n) => {
                assert_eq!(error.code, Some(n));
                assert!(error.is_rate_limit());
            }
            sim::ErrorCode::Text(text) => {
                assert_eq!(error.code_text, Some(text));
                assert!(!error.is_rate_limit());
            }
        }
    }
    sim.shutdown().await;
}

#[tokio::test]
async fn sim_faults_classify_as_transport_errors() {
    // Paced chunks, so the sim flushes its headers and first chunk before it cuts a truncated
    // stream (an unpaced body is cut before anything leaves the socket).
    let sim = start_sim_with(sim::SimConfig {
        token_rate: 1000,
        ..Default::default()
    })
    .await;
    let cases = [
        (sim::FaultKind::Truncated, "truncated"),
        (sim::FaultKind::MalformedJson, "malformed"),
        (sim::FaultKind::WrongContentType, "malformed"),
    ];
    for (kind, expected) in cases {
        sim.inject(sim::FaultSpec::new(kind));
        let (result, _, _) = call(&sim.base_url(), &request(true)).await;
        let got = transport(result);
        match expected {
            "truncated" => assert_eq!(got, TransportError::Truncated, "{kind:?}"),
            _ => assert!(
                matches!(got, TransportError::Malformed(_)),
                "{kind:?}: {got:?}"
            ),
        }
    }

    sim.inject(sim::FaultSpec::new(sim::FaultKind::UsageLayoutB));
    let (result, _, _) = call(&sim.base_url(), &request(true)).await;
    assert!(result.unwrap().usage.is_some());

    sim.inject(sim::FaultSpec::new(sim::FaultKind::Upstream429));
    let (result, _, _) = call(&sim.base_url(), &request(true)).await;
    let Err(CallError::Http { status, body, .. }) = result else {
        panic!("{result:?}")
    };
    assert_eq!(status, 429);
    let body: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(body["error"]["metadata"]["provider_name"], "Chutes");
    sim.shutdown().await;
}

/// Calls made at once by one provider client through the simulator, which answers each after
/// `latency_ms`, so that all of them are open together; returns how many TCP connections the
/// simulator accepted for them.
async fn connections_for(transport: Transport, calls: usize) -> u64 {
    let config = sim::SimConfig {
        latency_ms: 300,
        ..sim::SimConfig::default()
    };
    let sim = sim::start(config, "127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let timeouts = Timeouts {
        connect: Duration::from_secs(2),
        first_byte: Duration::from_secs(5),
        idle: Duration::from_secs(5),
        total: Duration::from_secs(10),
    };
    let provider = HttpProvider::with_transport(timeouts, transport).unwrap();
    let target = target(&sim.base_url());
    let req = ChatRequest {
        model: "openai/gpt-4o-mini".into(),
        messages: vec![Message::user("hi")],
        tools: vec![],
        stream: true,
        max_tokens: None,
        ask_cost: false,
    };
    let deltas = Deltas::default();
    let results =
        futures_util::future::join_all((0..calls).map(|_| provider.call(&target, &req, &deltas)))
            .await;
    for result in results {
        assert!(result.is_ok(), "{result:?}");
    }
    let log = sim.calls();
    assert_eq!(log.len(), calls, "every call reached the simulator");
    let accepted = sim.connections();
    sim.shutdown().await;
    accepted
}

/// HTTP/2 carries many calls on a connection, but a server caps the calls a connection holds at
/// once and hyper queues the rest on it: the client spreads them over connections of
/// `CALLS_PER_CONNECTION` calls.
#[tokio::test]
async fn http2_calls_share_connections_of_calls_per_connection_each() {
    let transport = Transport {
        http2: Http2::PriorKnowledge,
        calls_at_once: 250,
    };
    let lanes = 250usize.div_ceil(CALLS_PER_CONNECTION) as u64;
    assert!(lanes > 1, "250 calls fill more than one connection");
    assert_eq!(connections_for(transport, 250).await, lanes);
}

/// Over cleartext without prior knowledge, a call is HTTP/1.1 and has a connection of its own.
#[tokio::test]
async fn negotiated_http_over_cleartext_is_a_connection_per_call_at_once() {
    let transport = Transport {
        http2: Http2::Negotiated,
        calls_at_once: 250,
    };
    assert_eq!(connections_for(transport, 250).await, 250);
}

/// The self-signed certificate of [`tls_peer`]: no root of any platform vouches for it.
const PEER_CERT: &[u8] = include_bytes!("../support/tls/cert.pem");
const PEER_KEY: &[u8] = include_bytes!("../support/tls/key.pem");

/// A one-connection TLS server on loopback with [`PEER_CERT`]: returns its base URL and the
/// protocols the client's hello offered (ALPN), read before the handshake goes on.
async fn tls_peer() -> (String, oneshot::Receiver<Vec<String>>) {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base_url = format!("https://{}/api/v1", listener.local_addr().unwrap());
    let ring = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(ring)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![CertificateDer::from_pem_slice(PEER_CERT).unwrap()],
            PrivateKeyDer::from_pem_slice(PEER_KEY).unwrap(),
        )
        .unwrap();
    config.alpn_protocols = vec![b"h2".to_vec()];
    let (offered_tx, offered_rx) = oneshot::channel();
    tokio::spawn(async move {
        let (socket, _) = listener.accept().await.unwrap();
        let acceptor = rustls::server::Acceptor::default();
        let hello = tokio_rustls::LazyConfigAcceptor::new(acceptor, socket)
            .await
            .unwrap();
        let offered = hello.client_hello().alpn().map_or(vec![], |protocols| {
            protocols
                .map(|p| String::from_utf8_lossy(p).into_owned())
                .collect()
        });
        let _ = offered_tx.send(offered);
        // The client ends the handshake at the certificate; nothing more is read.
        let _ = hello.into_stream(std::sync::Arc::new(config)).await;
    });
    (base_url, offered_rx)
}

/// Every lane speaks the one TLS set-up the provider builds: it offers HTTP/2 and HTTP/1.1
/// (hosted providers then pick HTTP/2), and it checks the peer against the platform's roots, so
/// a certificate none of them vouches for ends the call as a connect error before any request.
#[tokio::test]
async fn tls_offers_http2_and_refuses_a_certificate_no_root_vouches_for() {
    for http2 in [Http2::Negotiated, Http2::PriorKnowledge] {
        let (base_url, offered) = tls_peer().await;
        let lanes = Transport {
            http2,
            calls_at_once: 250,
        };
        let provider = HttpProvider::with_transport(fast(), lanes).unwrap();
        let deltas = Deltas::default();
        let result = provider
            .call(&target(&base_url), &request(true), &deltas)
            .await;
        let expected = match http2 {
            Http2::Negotiated => vec!["h2", "http/1.1"],
            Http2::PriorKnowledge => vec!["h2"],
        };
        assert_eq!(offered.await.unwrap(), expected, "{http2:?}");
        match transport(result) {
            TransportError::Connect(why) => assert!(why.contains("certificate"), "{why}"),
            other => panic!("expected the certificate refused, got {other:?}"),
        }
    }
}
