//! The HTTP server: routes, the chat and key handlers, and starting/stopping the simulator.

use std::collections::BTreeMap;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::serve::ListenerExt;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use crate::calllog::CallRecord;
use crate::config::{ConfigPatch, Provider, SimConfig, UsageCost};
use crate::control;
use crate::faults::{DEFAULT_HUGE_BODY, FaultKind, FaultSpec, MidstreamLayout};
use crate::ids;
use crate::model::{self, CallStyle, Reply, Request, SERVING_PROVIDER, Turn};
use crate::price::{ModelPrice, Price};
use crate::state::{Admission, Shared, Stated, Verdict};
use crate::stream::{self, End, Plan, SseOptions};
use crate::wire::{self, Envelope, FaultCtx, Usage, X_GENERATION_ID};

/// Chat bodies above this are refused with 413; generous, since conversations grow with steps.
const MAX_BODY: usize = 32 * 1024 * 1024;
/// How long `shutdown` waits for connections to finish once pauses have been cut short.
const GRACE: Duration = Duration::from_secs(2);

const JSON: HeaderValue = HeaderValue::from_static("application/json");
const EVENT_STREAM: HeaderValue = HeaderValue::from_static("text/event-stream");
const HTML: HeaderValue = HeaderValue::from_static("text/html; charset=utf-8");

/// Where each provider is served: the path its real base URL ends with, under a prefix of its
/// own so one simulator plays them all at once.
pub const PATHS: [(Provider, &str); 4] = [
    (Provider::OpenRouter, "/api/v1"),
    (Provider::Groq, "/groq/openai/v1"),
    (Provider::Gemini, "/gemini/v1beta/openai"),
    (Provider::Generic, "/generic/v1"),
];

fn router(shared: Arc<Shared>) -> Router {
    let mut router = Router::new()
        // The unprefixed paths play the configured mode (`--mode`).
        .route("/openai/v1/chat/completions", post(chat_in_mode))
        .route("/v1/chat/completions", post(chat_in_mode));
    for (provider, base) in PATHS {
        let chat = move |sim, headers, body| chat(sim, headers, body, Some(provider));
        router = router.route(&format!("{base}/chat/completions"), post(chat));
    }
    router
        .route("/api/v1/key", get(key_info))
        .route("/api/v1/auth/key", get(key_info))
        .merge(control::routes())
        .fallback(not_found)
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state(shared)
}

/// The bearer key, if the request carries a non-empty one.
fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, key) = value.split_once(' ')?;
    let key = key.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !key.is_empty()).then_some(key)
}

async fn not_found() -> Response {
    let body = br#"{"error":{"code":404,"message":"Not Found"}}"#.to_vec();
    wire::json_response(StatusCode::NOT_FOUND, HeaderMap::new(), body)
}

async fn key_info(State(sim): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    let Some(key) = bearer(&headers) else {
        return wire::missing_auth_header().into_response();
    };
    let (used, limit, high_balance) = sim.read_key(key);
    wire::key_info(key, used, limit, high_balance)
}

async fn chat_in_mode(sim: State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> Response {
    chat(sim, headers, body, None).await
}

async fn chat(
    State(sim): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Bytes,
    provider: Option<Provider>,
) -> Response {
    let Some(key) = bearer(&headers) else {
        sim.log_rejected(provider, "", 401, "missing_auth");
        return wire::no_auth_credentials().into_response();
    };
    let req = match model::parse(&body) {
        Ok(req) => req,
        Err(message) => {
            sim.log_rejected(provider, key, 400, "invalid_request");
            return wire::invalid_request(message, key).into_response();
        }
    };
    let style = match provider {
        Some(Provider::Gemini) => CallStyle::Gemini,
        _ => CallStyle::Deltas,
    };
    if style == CallStyle::Gemini
        && let Some((name, position)) = model::missing_signature(&req)
    {
        sim.log_rejected(provider, key, 400, "missing_thought_signature");
        return wire::gemini_missing_signature(&name, position);
    }
    let turn = model::respond(&req, style);
    let traceparent = headers.get("traceparent").and_then(|v| v.to_str().ok());
    let adm = sim.admit(provider, key, &req, &turn, traceparent);
    match adm.verdict {
        Verdict::FreeTier(refusal) => {
            wire::free_tier_429(refusal, adm.config.shape, key).into_response()
        }
        Verdict::GroqLimited(g, refusal) => wire::groq_429(&req.model, key, &g, refusal),
        Verdict::GeminiLimited(r) => wire::gemini_429(&req.model, &r),
        Verdict::GenericLimited(w) => wire::openai_429(&req.model, key, &w, adm.now_ms),
        Verdict::Serve(ref fault) => serve(&sim, &req, &turn, key, &adm, fault.as_ref()).await,
    }
}

async fn serve(
    sim: &Shared,
    req: &Request,
    turn: &Turn,
    key: &str,
    adm: &Admission,
    fault: Option<&FaultSpec>,
) -> Response {
    let cfg = &adm.config;
    let kind = fault.map(|f| f.kind);
    let mut hold_ms = cfg.latency_ms;
    if let Some(f) = fault.filter(|f| f.kind == FaultKind::Timeout) {
        hold_ms = hold_ms.saturating_add(f.delay_ms());
    }
    if hold_ms > 0 {
        // Ends early when the simulator stops, so shutdown is not held up by a long fault.
        let _ = tokio::time::timeout(Duration::from_millis(hold_ms), sim.stopped()).await;
    }

    // Groq and OpenAI state their limits on every answer, errors included; OpenRouter's window
    // headers are for a served answer only, and must not override those of a fault's own 429.
    let mut headers = match &adm.stated {
        Some(Stated::Groq(g)) => wire::groq_headers(g),
        Some(Stated::Requests(w)) => wire::requests_headers(w, adm.now_ms),
        Some(Stated::Window(_)) | None => HeaderMap::new(),
    };
    if let Some(f) = fault {
        let ctx = FaultCtx {
            key,
            model: &req.model,
            now_ms: adm.now_ms,
            user_text: &turn.user_text,
            max_tokens: req.max_tokens,
            shape: cfg.shape,
        };
        if let Some(error) = wire::fault_error(f, &ctx) {
            return error.with_headers(headers).into_response();
        }
    }

    if let Some(Stated::Window(w)) = &adm.stated {
        headers.extend(wire::rate_limit_headers(w.limit, w.remaining, w.reset_ms));
    }
    let id = ids::generation_id(adm.now_ms);
    let env = Envelope {
        id: &id,
        created: adm.now_ms / 1000,
        model: model::served_model(&req.model),
        provider: SERVING_PROVIDER,
    };
    let shown = req.usage_include || cfg.usage_cost == UsageCost::Always;
    let usage = Usage::new(
        turn.prompt_tokens,
        turn.completion_tokens,
        adm.cost.filter(|_| shown),
    );
    let (content_type, plan) = match (kind, fault) {
        (Some(FaultKind::WrongContentType), _) => {
            (HTML, stream::whole(wire::HTML_PAGE.as_bytes().to_vec()))
        }
        _ if req.stream => (EVENT_STREAM, stream_plan(&env, turn, &usage, cfg, fault)),
        _ => (JSON, body_plan(&env, turn, &usage, key, fault)),
    };
    headers.insert(header::CONTENT_TYPE, content_type);
    if let Ok(v) = HeaderValue::from_str(&id) {
        headers.insert(X_GENERATION_ID, v);
    }
    let mut res = plan.into_body(sim.stop_signal()).into_response();
    res.headers_mut().extend(headers);
    res
}

fn stream_plan(
    env: &Envelope<'_>,
    turn: &Turn,
    usage: &Usage,
    cfg: &SimConfig,
    fault: Option<&FaultSpec>,
) -> Plan {
    let mut opts = SseOptions {
        keepalive: cfg.keepalive_comments,
        gap: match cfg.token_rate {
            0 => Duration::ZERO,
            rate => Duration::from_secs(1) / rate,
        },
        usage_layout_b: false,
        stall: None,
        end: End::Finish,
        style: turn.style,
    };
    if let Some(f) = fault {
        match f.kind {
            FaultKind::UsageLayoutB => opts.usage_layout_b = true,
            FaultKind::Stall => {
                opts.stall = Some((f.after_chunks(), Duration::from_millis(f.delay_ms())));
            }
            FaultKind::MidstreamError => {
                opts.end = End::Error {
                    after: f.after_chunks(),
                    layout: f.layout.unwrap_or_default(),
                    error: Box::new(wire::midstream_error(f)),
                    done: f.done.unwrap_or(true),
                };
            }
            FaultKind::Truncated => {
                opts.end = End::Cut {
                    after: f.after_chunks(),
                }
            }
            FaultKind::MalformedJson => return stream::malformed_sse(cfg.keepalive_comments),
            FaultKind::HugeBody => {
                let size = f.size_bytes.unwrap_or(DEFAULT_HUGE_BODY);
                return stream::whole(wire::padded_stream(env, size));
            }
            _ => {}
        }
    }
    stream::sse(env, &turn.reply, usage, opts)
}

fn body_plan(
    env: &Envelope<'_>,
    turn: &Turn,
    usage: &Usage,
    key: &str,
    fault: Option<&FaultSpec>,
) -> Plan {
    let completion = || wire::completion(env, &turn.reply, turn.style, usage);
    let Some(f) = fault else {
        return stream::whole(completion());
    };
    match f.kind {
        FaultKind::Stall => stream::stalled(completion(), Duration::from_millis(f.delay_ms())),
        FaultKind::Truncated => stream::cut_short(completion()),
        FaultKind::MalformedJson => {
            // A proper prefix of a JSON object is never valid JSON.
            let mut body = completion();
            body.truncate(body.len() / 2);
            stream::whole(body)
        }
        FaultKind::HugeBody => {
            let size = f.size_bytes.unwrap_or(DEFAULT_HUGE_BODY);
            stream::whole(wire::padded_completion(env, usage, size))
        }
        FaultKind::MidstreamError => {
            let error = wire::midstream_error(f);
            match f.layout.unwrap_or_default() {
                MidstreamLayout::FinishChoice => {
                    let partial: String = match &turn.reply {
                        Reply::Text(t) => t.split_inclusive(' ').take(f.after_chunks()).collect(),
                        Reply::Tools(_) => String::new(),
                    };
                    stream::whole(wire::completion_with_error(env, &partial, &error, usage))
                }
                MidstreamLayout::EmptyChoices | MidstreamLayout::EventError => {
                    stream::whole(wire::error_in_200(&error, key))
                }
                MidstreamLayout::TopLevelCode => stream::whole(wire::bare_error(&error, env.id)),
            }
        }
        _ => stream::whole(completion()),
    }
}

/// A running simulator. Dropping the handle stops it too (without waiting).
pub struct SimHandle {
    /// The bound address (the real port when started on port 0).
    pub addr: SocketAddr,
    shared: Arc<Shared>,
    accepted: Arc<AtomicU64>,
    task: Option<JoinHandle<io::Result<()>>>,
}

impl SimHandle {
    /// `http://ADDR/api/v1`, the OpenRouter base URL clients append `/chat/completions` to.
    pub fn base_url(&self) -> String {
        self.base_url_of(Provider::OpenRouter)
    }

    /// The base URL at which the simulator plays `provider`.
    pub fn base_url_of(&self, provider: Provider) -> String {
        let base = PATHS
            .iter()
            .find(|(p, _)| *p == provider)
            .map_or("/api/v1", |(_, base)| base);
        format!("http://{}{base}", self.addr)
    }

    /// A `FREEWAY_CONFIG` naming this simulator's Groq, Gemini and paid provider, with pools at
    /// the limits it plays (the limits in force when it started).
    pub fn freeway_config(&self) -> String {
        crate::freeway_config::render(&self.shared.config(), |p| self.base_url_of(p))
    }

    /// The TCP connections accepted since the start: a call apiece over HTTP/1.1, many calls
    /// apiece over HTTP/2 (which the simulator also speaks, as hosted providers do).
    pub fn connections(&self) -> u64 {
        self.accepted.load(Ordering::Relaxed)
    }

    /// Every logged chat request, oldest first.
    pub fn calls(&self) -> Vec<CallRecord> {
        self.shared.calls(0)
    }

    /// Clears counters, faults, the call log and the clock offset (as `POST /_sim/reset`).
    pub fn reset(&self) {
        self.shared.reset();
    }

    /// Queues a fault and returns its id. Unlike `POST /_sim/faults` this does not validate the
    /// spec (see [`FaultSpec::validate`]): fields a kind does not read are ignored, and a spec
    /// with `count: 0` never fires.
    pub fn inject(&self, fault: FaultSpec) -> u64 {
        self.shared.add_fault(fault)
    }

    /// How many times `GET /key` was read (it is no chat call, so it is not in [`Self::calls`]).
    pub fn key_reads(&self) -> u64 {
        self.shared.key_reads()
    }

    /// Changes live settings (as `POST /_sim/config`) and returns the settings now in force.
    pub fn patch_config(&self, patch: &ConfigPatch) -> Result<SimConfig, String> {
        self.shared.patch_config(patch)
    }

    /// Sets what paid models cost (as `POST /_sim/prices`; `*` is the default price), all or
    /// none, and returns every price now in force. A `:free` model cannot be priced.
    pub fn set_prices(&self, prices: &[ModelPrice]) -> Result<BTreeMap<String, Price>, String> {
        self.shared
            .set_prices(prices.iter().map(|p| (p.model.as_str(), p.price)))
    }

    /// Moves the sim clock forward (as `POST /_sim/clock`) and returns the new sim time in ms.
    pub fn advance_clock(&self, ms: u64) -> u64 {
        self.shared.advance_clock(ms)
    }

    /// Stops accepting connections, cuts pending holds and pauses short, and waits (briefly)
    /// for open connections to finish.
    pub async fn shutdown(mut self) {
        self.shared.stop();
        if let Some(task) = self.task.take() {
            match tokio::time::timeout(GRACE, task).await {
                Ok(Ok(Err(e))) => tracing::warn!("sim server ended with an error: {e}"),
                Ok(_) => {}
                Err(_) => tracing::warn!("sim connections still open after {GRACE:?}"),
            }
        }
    }
}

impl Drop for SimHandle {
    fn drop(&mut self) {
        self.shared.stop();
    }
}

/// Binds `addr` (port 0 picks a free port) and serves the simulator on a spawned task.
pub async fn start(config: SimConfig, addr: SocketAddr) -> io::Result<SimHandle> {
    config
        .validate()
        .map_err(|m| io::Error::new(io::ErrorKind::InvalidInput, m))?;
    let listener = TcpListener::bind(addr).await?;
    let addr = listener.local_addr()?;
    let accepted = Arc::new(AtomicU64::new(0));
    let counted = accepted.clone();
    let listener = listener.tap_io(move |tcp| {
        counted.fetch_add(1, Ordering::Relaxed);
        // Small SSE events must leave at once, not wait for Nagle's algorithm.
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!("TCP_NODELAY not set: {e}");
        }
    });
    let shared = Arc::new(Shared::new(config));
    let app = router(shared.clone());
    let stopped = shared.stopped();
    let task = tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(stopped)
            .await
    });
    tracing::info!(%addr, ?config, "sim started");
    Ok(SimHandle {
        addr,
        shared,
        accepted,
        task: Some(task),
    })
}
