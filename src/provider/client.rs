//! The HTTP side of a call: one POST, its deadlines, and the bytes of its answer.
//!
//! Every way a peer can misbehave (refuse, stall before the headers, stall mid-stream, trickle
//! forever, send too much, send the wrong thing, hang up early) ends in a [`CallError`] within
//! the call's [`Timeouts`], so the engine can classify it and move on; nothing here retries
//! (docs/design.md §2.1: the chain is the retry). The deadlines are enforced here with tokio timers
//! rather than reqwest's, so that each one maps to its own [`TransportError`].

use super::sse::{Progress, StreamParser};
use super::wire;
use super::*;
use bytes::{Bytes, BytesMut};
use reqwest::header::{self, HeaderMap, HeaderValue};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::time::{Instant, timeout_at};

/// The timeouts of one call. There is no retry anywhere: a timeout is a classified failure.
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    /// Establishing the connection (TCP and TLS).
    pub connect: Duration,
    /// From the end of `connect`'s allowance to the response headers: the headers must arrive
    /// within `connect + first_byte` of the start.
    pub first_byte: Duration,
    /// Between two chunks of the body.
    pub idle: Duration,
    /// The whole call, body included.
    pub total: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Self {
            connect: Duration::from_secs(10),
            first_byte: Duration::from_secs(60),
            idle: Duration::from_secs(60),
            total: Duration::from_secs(300),
        }
    }
}

/// How much of an error body (non-2xx) is kept for the classifier; the rest is not read.
pub const ERROR_BODY_CAP: usize = 1 << 20;
/// The largest successful body, streamed or not, before the call fails with `TooLarge`.
pub const BODY_CAP: usize = 8 << 20;

/// The HTTP client could not be built: TLS could not be set up (no platform roots), or reqwest
/// refused the settings.
#[derive(Debug, thiserror::Error)]
pub enum ProviderInitError {
    #[error("cannot set up TLS: {0}")]
    Tls(#[from] rustls::Error),
    #[error("cannot build the HTTP client: {0}")]
    Client(#[from] reqwest::Error),
}

/// Calls one HTTP/2 connection carries at once. A server caps a connection's concurrent streams
/// (`SETTINGS_MAX_CONCURRENT_STREAMS`, commonly 100 to 256; hyper's server says 200) and
/// hyper queues the calls past the cap on that one connection, where they wait unseen for their
/// first-byte deadline; 100 fits every cap we know of.
pub const CALLS_PER_CONNECTION: usize = 100;

/// Which HTTP a call speaks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Http2 {
    /// HTTP/2 where TLS negotiates it (every hosted provider), HTTP/1.1 over cleartext.
    #[default]
    Negotiated,
    /// HTTP/2 from the first byte over cleartext too (h2c with prior knowledge), for a gateway
    /// or simulator on `http://` that speaks it; every provider must then speak HTTP/2.
    PriorKnowledge,
}

/// How a replica reaches providers: which HTTP, and how many calls it makes at once.
#[derive(Debug, Clone, Copy)]
pub struct Transport {
    pub http2: Http2,
    /// The replica's concurrency: it sizes the connections HTTP/2 calls are spread over.
    pub calls_at_once: usize,
}

impl Default for Transport {
    fn default() -> Self {
        Transport {
            http2: Http2::Negotiated,
            calls_at_once: 1,
        }
    }
}

/// [`ChatProvider`] over HTTP: pooled clients shared by all calls.
///
/// HTTP/2 puts every call to one host on one connection per client, so the calls are spread over
/// *lanes*, clients of their own, [`CALLS_PER_CONNECTION`] each: a replica at 5,000 calls holds
/// 50 connections to a provider, and a server's stream cap never queues a call. Over HTTP/1.1,
/// where each call has a connection of its own anyway, the lanes change nothing.
#[derive(Debug, Clone)]
pub struct HttpProvider {
    lanes: Arc<[Lane]>,
    timeouts: Timeouts,
}

#[derive(Debug)]
struct Lane {
    client: reqwest::Client,
    calls: AtomicUsize,
}

/// A call's place in its lane, given back when the call ends however it ends.
struct InLane<'a>(&'a Lane);

impl Drop for InLane<'_> {
    fn drop(&mut self) {
        self.0.calls.fetch_sub(1, Ordering::Relaxed);
    }
}

impl HttpProvider {
    /// One lane, HTTP/2 where TLS negotiates it: for a process that makes a call at a time.
    pub fn new(timeouts: Timeouts) -> Result<HttpProvider, ProviderInitError> {
        HttpProvider::with_transport(timeouts, Transport::default())
    }

    pub fn with_transport(
        timeouts: Timeouts,
        transport: Transport,
    ) -> Result<HttpProvider, ProviderInitError> {
        // The lanes bring their own crypto provider; reqwest clients built elsewhere in the
        // process (the tool service's) need the process-wide one.
        install_crypto();
        let tls = tls(transport.http2)?;
        let lanes = transport
            .calls_at_once
            .div_ceil(CALLS_PER_CONNECTION)
            .max(1);
        let lanes = (0..lanes)
            .map(|_| {
                let builder = reqwest::Client::builder()
                    .tls_backend_preconfigured(tls.clone())
                    .connect_timeout(timeouts.connect)
                    // reqwest would otherwise replay a request refused by HTTP/2 (REFUSED_STREAM,
                    // GOAWAY); every call must be one attempt that the budget has counted.
                    .retry(reqwest::retry::never())
                    // A redirect would be a second request; surface the 3xx as an answer instead.
                    .redirect(reqwest::redirect::Policy::none());
                let builder = match transport.http2 {
                    Http2::Negotiated => builder,
                    Http2::PriorKnowledge => builder.http2_prior_knowledge(),
                };
                Ok(Lane {
                    client: builder.build()?,
                    calls: AtomicUsize::new(0),
                })
            })
            .collect::<Result<Arc<[Lane]>, ProviderInitError>>()?;
        Ok(HttpProvider { lanes, timeouts })
    }

    /// The pooled client, for the provider's other endpoints (quota reads).
    pub(super) fn client(&self) -> &reqwest::Client {
        &self.lanes[0].client
    }

    /// The first lane with room, so that a quiet replica keeps one connection a host; when all
    /// are full (more calls than the replica's concurrency), the least busy.
    fn lane(&self) -> InLane<'_> {
        let lanes = &self.lanes;
        let lane = lanes
            .iter()
            .find(|l| l.calls.load(Ordering::Relaxed) < CALLS_PER_CONNECTION)
            .or_else(|| lanes.iter().min_by_key(|l| l.calls.load(Ordering::Relaxed)))
            .expect("a provider has at least one lane");
        lane.calls.fetch_add(1, Ordering::Relaxed);
        InLane(lane)
    }

    fn endpoint(base_url: &str) -> String {
        format!("{}/chat/completions", base_url.trim_end_matches('/'))
    }
}

/// The TLS every lane speaks, built once and shared: what reqwest would build per client (ring,
/// the platform's verifier and roots, the ALPN `http2` asks for), where each client parsing the
/// platform's roots again cost 9 MB and 200 ms of start-up at 50 lanes.
fn tls(http2: Http2) -> Result<rustls::ClientConfig, ProviderInitError> {
    let ring = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = rustls_platform_verifier::Verifier::new(ring.clone())?;
    let mut tls = rustls::ClientConfig::builder_with_provider(ring)
        .with_protocol_versions(rustls::ALL_VERSIONS)?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier))
        .with_no_client_auth();
    tls.alpn_protocols = match http2 {
        Http2::Negotiated => vec![b"h2".to_vec(), b"http/1.1".to_vec()],
        Http2::PriorKnowledge => vec![b"h2".to_vec()],
    };
    Ok(tls)
}

#[async_trait]
impl ChatProvider for HttpProvider {
    async fn call(
        &self,
        target: &Target,
        request: &ChatRequest,
        deltas: &Deltas,
    ) -> Result<Completion, CallError> {
        let started = Instant::now();
        let lane = self.lane();
        let result = self
            .call_inner(&lane.0.client, target, request, deltas, started)
            .await;
        drop(lane);
        match &result {
            Ok(c) => tracing::debug!(
                model = %request.model,
                elapsed_ms = started.elapsed().as_millis() as u64,
                finish_reason = ?c.finish_reason,
                "provider call succeeded"
            ),
            Err(e) => tracing::debug!(
                model = %request.model,
                elapsed_ms = started.elapsed().as_millis() as u64,
                error = %e,
                "provider call failed"
            ),
        }
        result
    }
}

/// Why reading the next piece of a body stopped.
enum ReadError {
    Idle,
    Total,
    Body(reqwest::Error),
}

impl HttpProvider {
    async fn call_inner(
        &self,
        client: &reqwest::Client,
        target: &Target,
        request: &ChatRequest,
        deltas: &Deltas,
        started: Instant,
    ) -> Result<Completion, CallError> {
        let t = self.timeouts;
        let total_deadline = started + t.total;
        let header_limit = started + t.connect + t.first_byte;
        let header_deadline = header_limit.min(total_deadline);

        let body = wire::request_body(request)
            .map_err(|e| other(format!("cannot encode the request: {e}")))?;
        let mut auth = HeaderValue::try_from(format!("Bearer {}", target.api_key.expose()))
            .map_err(|_| other("the API key is not a valid header value"))?;
        auth.set_sensitive(true);
        let accept = if request.stream {
            "text/event-stream"
        } else {
            "application/json"
        };
        let mut sending = client
            .post(Self::endpoint(&target.base_url))
            .header(header::AUTHORIZATION, auth)
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::ACCEPT, accept);
        // The attempt's span continues in the provider's own traces, where it keeps them.
        if let Some(traceparent) = crate::telemetry::traceparent(&tracing::Span::current()) {
            sending = sending.header("traceparent", traceparent);
        }
        let sending = sending.body(body).send();

        let mut response = match timeout_at(header_deadline, sending).await {
            Ok(Ok(response)) => response,
            Ok(Err(e)) => return Err(send_error(&e)),
            Err(_) if header_limit <= total_deadline => {
                return Err(CallError::Transport(TransportError::FirstByteTimeout));
            }
            Err(_) => return Err(CallError::Transport(TransportError::TotalTimeout)),
        };

        let status = response.status();
        tracing::debug!(model = %request.model, status = status.as_u16(), "provider answered");
        if !status.is_success() {
            let headers = response
                .headers()
                .iter()
                .map(|(name, value)| {
                    (
                        name.as_str(),
                        String::from_utf8_lossy(value.as_bytes()).into_owned(),
                    )
                })
                .collect();
            let body = self.error_body(&mut response, total_deadline).await;
            return Err(CallError::Http {
                status: status.as_u16(),
                headers,
                body,
            });
        }

        let ratelimit_remaining = ratelimit_remaining(response.headers());
        let ratelimit_reset_ms = ratelimit_reset_ms(response.headers());
        let limit_headers = limit_headers(response.headers());
        let media_type = media_type(response.headers());
        let mut completion = match media_type.as_str() {
            "text/event-stream" if request.stream => {
                self.read_stream(&mut response, deltas, total_deadline)
                    .await?
            }
            // A provider may answer a streaming request with one JSON body (typically an error
            // inside a 200): read it rather than lose the error, and pass its text on at once.
            "application/json" => {
                let body = self.read_body(&mut response, total_deadline).await?;
                let completion = wire::completion(&body)?;
                if request.stream && !completion.text.is_empty() {
                    deltas.push(&completion.text);
                }
                completion
            }
            unexpected => {
                return Err(wire::malformed(format!(
                    "unexpected content type {unexpected:?} for a {} request",
                    if request.stream {
                        "streaming"
                    } else {
                        "non-streaming"
                    }
                )));
            }
        };
        completion.ratelimit_remaining = ratelimit_remaining;
        completion.ratelimit_reset_ms = ratelimit_reset_ms;
        completion.limit_headers = limit_headers;
        Ok(completion)
    }

    /// The next piece of a body, within the idle and total deadlines.
    async fn next_chunk(
        &self,
        response: &mut reqwest::Response,
        total_deadline: Instant,
    ) -> Result<Option<Bytes>, ReadError> {
        let idle_deadline = Instant::now() + self.timeouts.idle;
        match timeout_at(idle_deadline.min(total_deadline), response.chunk()).await {
            Ok(read) => read.map_err(ReadError::Body),
            Err(_) if total_deadline <= idle_deadline => Err(ReadError::Total),
            Err(_) => Err(ReadError::Idle),
        }
    }

    /// Up to [`ERROR_BODY_CAP`] of an error body. The status already says what happened, so a
    /// body that stalls, breaks or overflows is kept as far as it came.
    async fn error_body(&self, response: &mut reqwest::Response, total_deadline: Instant) -> Bytes {
        let mut body = BytesMut::new();
        while body.len() < ERROR_BODY_CAP {
            match self.next_chunk(response, total_deadline).await {
                Ok(Some(chunk)) => body.extend_from_slice(&chunk),
                Ok(None) => break,
                Err(_) => {
                    tracing::debug!("error body cut short");
                    break;
                }
            }
        }
        body.truncate(ERROR_BODY_CAP);
        body.freeze()
    }

    /// A whole (non-streaming) body, at most [`BODY_CAP`].
    async fn read_body(
        &self,
        response: &mut reqwest::Response,
        total_deadline: Instant,
    ) -> Result<Bytes, CallError> {
        if response
            .content_length()
            .is_some_and(|n| n > BODY_CAP as u64)
        {
            return Err(CallError::Transport(TransportError::TooLarge));
        }
        let mut body = BytesMut::new();
        loop {
            match self.next_chunk(response, total_deadline).await {
                Ok(Some(chunk)) => {
                    if body.len() + chunk.len() > BODY_CAP {
                        return Err(CallError::Transport(TransportError::TooLarge));
                    }
                    body.extend_from_slice(&chunk);
                }
                Ok(None) => return Ok(body.freeze()),
                Err(ReadError::Body(e)) => {
                    tracing::debug!(error = %chain(&e), "body cut short");
                    return Err(CallError::Transport(TransportError::Truncated));
                }
                Err(e) => return Err(timeout_error(e)),
            }
        }
    }

    /// A `text/event-stream` body, reassembled; text deltas go out as they arrive.
    async fn read_stream(
        &self,
        response: &mut reqwest::Response,
        deltas: &Deltas,
        total_deadline: Instant,
    ) -> Result<Completion, CallError> {
        let mut parser = StreamParser::default();
        // The engine may stop listening; the call still completes for the transcript.
        let mut on_text = |text: &str| {
            deltas.push(text);
        };
        let mut received = 0usize;
        loop {
            match self.next_chunk(response, total_deadline).await {
                Ok(Some(chunk)) => {
                    received += chunk.len();
                    if received > BODY_CAP {
                        return Err(CallError::Transport(TransportError::TooLarge));
                    }
                    if parser.feed(&chunk, &mut on_text)? == Progress::Done {
                        break;
                    }
                }
                Ok(None) => break,
                // A connection that breaks is read like one that ends: complete only if the
                // answer had already finished, else truncated.
                Err(ReadError::Body(e)) => {
                    tracing::debug!(error = %chain(&e), "stream cut short");
                    break;
                }
                Err(e) => return Err(timeout_error(e)),
            }
        }
        parser.finish(&mut on_text)
    }
}

fn timeout_error(e: ReadError) -> CallError {
    CallError::Transport(match e {
        ReadError::Idle => TransportError::IdleTimeout,
        ReadError::Total => TransportError::TotalTimeout,
        ReadError::Body(e) => TransportError::Other(chain(&e)),
    })
}

fn other(why: impl Into<String>) -> CallError {
    CallError::Transport(TransportError::Other(why.into()))
}

/// A failure before any response: refused, unresolvable, reset, or not even a valid request.
fn send_error(e: &reqwest::Error) -> CallError {
    CallError::Transport(if e.is_connect() {
        TransportError::Connect(chain(e))
    } else {
        TransportError::Other(chain(e))
    })
}

/// The error and its causes on one line (reqwest's own message alone rarely says what failed).
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

/// The media type of `Content-Type`, lowercased, without parameters (`; charset=utf-8`).
fn media_type(headers: &HeaderMap) -> String {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .map(|v| v.trim().to_ascii_lowercase())
        .unwrap_or_default()
}

/// OpenRouter's `X-RateLimit-Remaining` or Groq's `x-ratelimit-remaining-requests`.
fn ratelimit_remaining(headers: &HeaderMap) -> Option<i64> {
    ["x-ratelimit-remaining", "x-ratelimit-remaining-requests"]
        .iter()
        .find_map(|name| headers.get(*name)?.to_str().ok()?.trim().parse().ok())
}

/// The headers in which providers state their limits (a few of a response's dozens).
fn limit_headers(headers: &HeaderMap) -> crate::headers::Headers {
    headers
        .iter()
        .filter(|(name, _)| {
            let name = name.as_str();
            name.starts_with("x-ratelimit-") || name.starts_with("retry-after")
        })
        .filter_map(|(name, value)| Some((name.as_str(), value.to_str().ok()?)))
        .collect()
}

/// When the request allowance refills, read from the two headers that can say.
fn ratelimit_reset_ms(headers: &HeaderMap) -> Option<u64> {
    let mut read = crate::headers::Headers::new();
    for name in ["x-ratelimit-reset-requests", "x-ratelimit-reset"] {
        if let Some(v) = headers.get(name).and_then(|v| v.to_str().ok()) {
            read.push(name, v);
        }
    }
    crate::classify::headroom_reset_ms(&read, crate::clock::epoch_ms())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_joins_without_a_double_slash() {
        assert_eq!(
            HttpProvider::endpoint("http://h/api/v1/"),
            "http://h/api/v1/chat/completions"
        );
        assert_eq!(
            HttpProvider::endpoint("http://h/api/v1"),
            "http://h/api/v1/chat/completions"
        );
    }

    #[test]
    fn media_type_ignores_parameters_and_case() {
        let mut h = HeaderMap::new();
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("Application/JSON; charset=utf-8"),
        );
        assert_eq!(media_type(&h), "application/json");
        assert_eq!(media_type(&HeaderMap::new()), "");
    }

    #[test]
    fn ratelimit_remaining_reads_either_header() {
        let mut h = HeaderMap::new();
        h.insert(
            "x-ratelimit-remaining-requests",
            HeaderValue::from_static(" 14370"),
        );
        assert_eq!(ratelimit_remaining(&h), Some(14370));
        h.insert("x-ratelimit-remaining", HeaderValue::from_static("0"));
        assert_eq!(ratelimit_remaining(&h), Some(0));
        let mut bad = HeaderMap::new();
        bad.insert("x-ratelimit-remaining", HeaderValue::from_static("many"));
        assert_eq!(ratelimit_remaining(&bad), None);
    }
}
