//! A web app that streams a freeway run's answer in its users' browsers, without ever giving a
//! browser the API token.
//!
//! The app's server holds `FREEWAY_API_TOKEN` and enqueues a run for the user's question
//! (`POST /ask` → freeway's `POST /v1/runs`); it hands the browser only the run's signed
//! `events_url`, which opens that run's event stream and nothing else. The page subscribes with
//! `EventSource` and writes the answer as its deltas arrive, shows a delayed run's countdown, and
//! turns every refusal (of the run, or of its stream) into a message. freeway must have
//! `FREEWAY_SECRET_KEY` (to sign the URL) and this app's origin in `FREEWAY_CORS_ORIGINS`.
//!
//! ```text
//! FREEWAY_URL=http://127.0.0.1:8080 FREEWAY_API_TOKEN=… \
//!   cargo run -p producer --example webapp -- 127.0.0.1:3000
//! ```
//!
//! `webapp --help` lists the settings: the server reaches freeway at `FREEWAY_URL`, browsers at
//! `FREEWAY_PUBLIC_URL` (when they differ, as behind a proxy), and the route is
//! `FREEWAY_PROVIDER` / `FREEWAY_MODEL`.

use axum::Json;
use axum::extract::State;
use axum::extract::rejection::JsonRejection;
use axum::http::{StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

const USAGE: &str = "\
usage: webapp [ADDR]

A web app that asks freeway for a run per question and streams its answer to the browser
through the run's signed events_url; the API token never leaves this server.

  ADDR  where the app listens (default 127.0.0.1:3000)

environment:
  FREEWAY_URL         freeway's base URL as this server reaches it (required),
                      e.g. http://127.0.0.1:8080
  FREEWAY_PUBLIC_URL  freeway's base URL as the users' browsers reach it: the events_url handed
                      to the page is built on it (default: FREEWAY_URL)
  FREEWAY_API_TOKEN   freeway's API token (required); kept on this server
  FREEWAY_PROVIDER    the route's provider, one freeway configures (default openrouter)
  FREEWAY_MODEL       the route's model (default openrouter/free)

freeway needs FREEWAY_SECRET_KEY (it signs the events_url) and this app's origin (the URL its
pages are served from) in FREEWAY_CORS_ORIGINS.
";

/// How long the server waits on freeway for an enqueue or a stream check: a page must not stay
/// "asking" because freeway hangs.
const FREEWAY_TIMEOUT: Duration = Duration::from_secs(15);

struct App {
    http: reqwest::Client,
    /// freeway as this server reaches it.
    server: String,
    /// freeway as browsers reach it.
    public: String,
    token: String,
    provider: String,
    model: String,
}

/// The one page. It holds no secret: it asks this app for a run and reads the run's events
/// straight from freeway with the URL it is given.
const PAGE: &str = r#"<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>Ask</title>
<style>body{font-family:system-ui,sans-serif;max-width:40rem;margin:2rem auto;padding:0 1rem}
#state{font-weight:600}
#answer{white-space:pre-wrap;border:1px solid #ccc;border-radius:6px;padding:.6rem;min-height:3rem}</style>
</head><body>
<h1>Ask</h1>
<form id="ask"><label for="q">Question</label> <input id="q" required> <button>Ask</button></form>
<p role="status"><span id="state"></span> <span id="detail"></span></p>
<div id="answer" aria-live="polite"></div>
<script>
const $ = (id) => document.getElementById(id);
// Streams refused for want of a slot are tried again this many times, then the page gives up.
const MAX_REOPENS = 5;
// Each question bumps the generation: whatever still arrives for an older one is dropped.
let generation = 0;
// The one EventSource open: a question closes the previous one before it asks.
let stream = null;
// The countdown (of a delay, or to the next try) shown in #detail.
let timer = null;

function show(state, detail = '') {
  clearInterval(timer);
  timer = null;
  $('state').textContent = state;
  $('detail').textContent = detail;
}

// Count down to untilMs in #detail; `then` runs once it is reached.
function countdown(untilMs, text, then) {
  clearInterval(timer);
  const tick = () => {
    const left = Math.max(0, Math.ceil((untilMs - Date.now()) / 1000));
    $('detail').textContent = text(left);
    if (left === 0 && then) {
      clearInterval(timer);
      timer = null;
      then();
    }
  };
  tick();
  timer = setInterval(tick, 250);
}

function stop() {
  if (stream) stream.close();
  stream = null;
  show('', '');
}

// A refusal as freeway words it: {code, message, retry_after_s}; this app relays freeway's.
function refused(what, status, error) {
  const e = error && typeof error === 'object' ? error : { message: error ? String(error) : '' };
  const head = `${what} (${status}${e.code ? ' ' + e.code : ''}): ${e.message || 'no reason given'}`;
  show('refused');
  if (e.retry_after_s > 0) {
    countdown(Date.now() + e.retry_after_s * 1000, (s) => `${head}; try again in ${s} s`);
  } else {
    $('detail').textContent = head;
  }
}

function follow(mine, url, reopens) {
  // A new EventSource replays the run's stream from its start.
  $('answer').textContent = '';
  const events = new EventSource(url);
  stream = events;
  const current = () => mine === generation && stream === events;
  const on = (type, handle) => events.addEventListener(type, (e) => {
    if (!current()) return;
    let data = {};
    try { data = JSON.parse(e.data); } catch { /* an event without JSON still says its type */ }
    handle(data);
  });
  const end = (state, detail) => { events.close(); stream = null; show(state, detail); };
  on('queued', () => show('queued'));
  on('delayed', (d) => {
    show('delayed');
    const why = d.reason ? ` (${d.reason})` : '';
    countdown(d.until_ms, (s) => (s > 0 ? `retrying in ${s} s` : 'retrying now') + why);
  });
  on('waiting', (d) => {
    show('waiting');
    countdown(d.until_ms, (s) => `for a free slot, at most ${s} s`);
  });
  on('started', () => show('answering'));
  on('attempt', () => { if ($('state').textContent !== 'answering') show('answering'); });
  on('delta', (d) => { $('answer').textContent += d.text ?? ''; });
  on('finished', (d) => end(d.status || 'finished', d.code ? `code ${d.code}` : ''));
  on('refused', (d) => {
    end('refused');
    const code = d.code || 'refused';
    if (d.retry_after_s > 0) {
      countdown(Date.now() + d.retry_after_s * 1000, (s) => `${code}: try again in ${s} s`);
    } else {
      $('detail').textContent = code;
    }
  });
  on('cancelled', () => end('cancelled'));
  on('awaiting_approval', () => end('awaiting approval', 'the run waits for a tool call to be approved'));
  events.onopen = () => {
    if (current() && $('detail').textContent === 'the live stream was cut; reconnecting') $('detail').textContent = '';
  };
  events.onerror = () => {
    if (!current()) return;
    // CONNECTING: the stream was cut and the browser reconnects by itself, resuming after the
    // last event. CLOSED: freeway answered with an error status, which the browser never
    // retries and does not tell the page.
    if (events.readyState !== EventSource.CLOSED) {
      if (!timer) $('detail').textContent = 'the live stream was cut; reconnecting';
      return;
    }
    stream = null;
    streamRefused(mine, url, reopens);
  };
}

// Why freeway refused the stream, asked through this app's server: freeway's refusals carry no
// Access-Control-Allow-Origin, so the page itself cannot read them.
async function streamRefused(mine, url, reopens) {
  show('stream refused', 'the live stream was refused; asking why');
  let why = {};
  try {
    const r = await fetch('/events-check', { method: 'POST', headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ events_url: url }) });
    why = await r.json();
    if (!r.ok) why = { message: why.error?.message || `this app answered ${r.status}` };
  } catch (e) {
    why = { message: `the reason could not be read: ${e.message}` };
  }
  if (mine !== generation) return;
  const status = why.status ?? 'unknown status';
  if (why.status === 200 && reopens < MAX_REOPENS) {
    follow(mine, url, reopens + 1);
    return;
  }
  const head = `the live stream was refused (${status}): ${why.message || 'no reason given'}`;
  if (why.retry_after_s > 0 && reopens < MAX_REOPENS) {
    countdown(Date.now() + why.retry_after_s * 1000, (s) => `${head}; retrying in ${s} s`,
      () => { if (mine === generation) follow(mine, url, reopens + 1); });
  } else {
    show('stream refused', head);
  }
}

$('ask').addEventListener('submit', async (ev) => {
  ev.preventDefault();
  const mine = ++generation;
  stop();
  $('answer').textContent = '';
  delete document.body.dataset.runId;
  delete document.body.dataset.eventsUrl;
  show('asking');
  let r, body;
  try {
    r = await fetch('/ask', { method: 'POST', headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ question: $('q').value }) });
    body = await r.json().catch(() => ({}));
  } catch (e) {
    if (mine === generation) show('error', `this app cannot be reached: ${e.message}`);
    return;
  }
  if (mine !== generation) return;
  if (!r.ok) { refused('the question was refused', r.status, body.error); return; }
  document.body.dataset.runId = body.run_id;
  document.body.dataset.eventsUrl = body.events_url;
  show('queued');
  follow(mine, body.events_url, 0);
});
</script>
</body></html>"#;

async fn page() -> Html<&'static str> {
    Html(PAGE)
}

/// An error as freeway words its own, so the page reads one shape whoever refused.
/// freeway did not answer: logged here, a 502 for the page.
fn unreachable(app: &App, e: &reqwest::Error) -> Response {
    eprintln!("webapp: cannot reach freeway at {}: {e}", app.server);
    error(
        StatusCode::BAD_GATEWAY,
        "unavailable",
        "freeway cannot be reached; try again",
    )
}

fn error(status: StatusCode, code: &str, message: impl Into<String>) -> Response {
    let body = json!({ "error": { "code": code, "message": message.into() } });
    (status, Json(body)).into_response()
}

/// freeway's refusal, relayed with its status: its code, message and `retry_after_s` (from the
/// body, else from `Retry-After`). A body that is not freeway's (a proxy's page) is named.
fn relay(status: u16, body: &str, retry_after: Option<u64>) -> Value {
    let reply: Value = serde_json::from_str(body).unwrap_or(Value::Null);
    let found = &reply["error"];
    let mut error = json!({
        "code": found["code"].as_str().unwrap_or("upstream_error"),
        "message": found["message"]
            .as_str()
            .map_or_else(|| format!("freeway answered {status}"), str::to_string),
    });
    if let Some(s) = found["retry_after_s"].as_u64().or(retry_after) {
        error["retry_after_s"] = s.into();
    }
    error
}

fn retry_after(resp: &reqwest::Response) -> Option<u64> {
    resp.headers()
        .get(header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Enqueue a run for the question, as the user `web-user` (a real app names its signed-in user),
/// and answer with the run's id and its events URL on freeway's public address.
async fn ask(State(app): State<Arc<App>>, body: Result<Json<Value>, JsonRejection>) -> Response {
    let question = body
        .as_ref()
        .ok()
        .and_then(|Json(b)| b["question"].as_str())
        .filter(|q| !q.trim().is_empty());
    let Some(question) = question else {
        return error(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "a question is required",
        );
    };
    let run = json!({
        "user_id": "web-user",
        "input": question,
        "routes": [{ "provider": app.provider, "model": app.model }],
        // While the route rests the run waits rather than being refused: the page shows the
        // delay and counts down to its end.
        "on_rest": "queue",
    });
    let sent = app
        .http
        .post(format!("{}/v1/runs", app.server))
        .bearer_auth(&app.token)
        .header(header::CONTENT_TYPE, "application/json")
        .body(run.to_string())
        .send()
        .await;
    let resp = match sent {
        Ok(resp) => resp,
        Err(e) => return unreachable(&app, &e),
    };
    let status = resp.status().as_u16();
    let retry = retry_after(&resp);
    let text = match resp.text().await {
        Ok(text) => text,
        Err(e) => {
            eprintln!("webapp: freeway's answer to the enqueue was cut: {e}");
            return error(
                StatusCode::BAD_GATEWAY,
                "unavailable",
                "freeway's answer was cut; try again",
            );
        }
    };
    if status != 202 {
        let refusal = relay(status, &text, retry);
        eprintln!("webapp: freeway refused the run ({status}): {refusal}");
        let status = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY);
        return (status, Json(json!({ "error": refusal }))).into_response();
    }
    let run: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
    let (Some(run_id), Some(path)) = (run["run_id"].as_str(), run["events_url"].as_str()) else {
        eprintln!("webapp: freeway's 202 has no run_id or events_url: {text}");
        return error(
            StatusCode::BAD_GATEWAY,
            "upstream_error",
            "freeway's answer has no run to follow",
        );
    };
    if !path.contains("token=") {
        // Without one the browser would get 401 from freeway and never know why.
        eprintln!("webapp: freeway signs no events_url: it needs FREEWAY_SECRET_KEY");
        return error(
            StatusCode::BAD_GATEWAY,
            "not_configured",
            "the run was enqueued, but freeway gave no events URL a browser may open",
        );
    }
    Json(json!({ "run_id": run_id, "events_url": format!("{}{path}", app.public) })).into_response()
}

impl App {
    /// The events URL a page was given, on freeway's server address; `None` for anything but a
    /// run's signed events URL on the public address, so the check below never fetches another
    /// URL a page names.
    fn server_events_url(&self, events_url: &str) -> Option<String> {
        let rest = events_url.strip_prefix(&self.public)?;
        let (path, query) = rest.split_once('?')?;
        let run_id = path.strip_prefix("/v1/runs/")?.strip_suffix("/events")?;
        let token = query.strip_prefix("token=")?;
        let id_ok = (1..=64).contains(&run_id.len())
            && run_id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        let token_ok = (1..=512).contains(&token.len())
            && token
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.~%".contains(&b));
        (id_ok && token_ok)
            .then(|| format!("{}/v1/runs/{run_id}/events?token={token}", self.server))
    }
}

/// Why a page's `EventSource` was refused: the same URL asked again from here, where freeway's
/// status, message and `Retry-After` can be read (a browser gets no CORS headers on a refusal,
/// so a page cannot). `{"status": 200}` when the stream opens now.
async fn check_events(
    State(app): State<Arc<App>>,
    body: Result<Json<Value>, JsonRejection>,
) -> Response {
    let url = body
        .as_ref()
        .ok()
        .and_then(|Json(b)| b["events_url"].as_str());
    let Some(target) = url.and_then(|u| app.server_events_url(u)) else {
        return error(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "events_url must be a run's events URL as this app gave it",
        );
    };
    let resp = match app.http.get(&target).send().await {
        Ok(resp) => resp,
        Err(e) => return unreachable(&app, &e),
    };
    let status = resp.status().as_u16();
    if resp.status().is_success() {
        // Dropped unread: the stream's slot is freeway's again as soon as it sees us go.
        drop(resp);
        return Json(json!({ "status": status })).into_response();
    }
    let retry = retry_after(&resp);
    let text = resp.text().await.unwrap_or_default();
    let mut why = relay(status, &text, retry);
    why["status"] = status.into();
    Json(why).into_response()
}

/// A base URL setting: http(s), without a query; returned without its trailing `/`.
fn base_url(var: &str, value: &str) -> Result<String, String> {
    let bad = || {
        format!("{var} must be an http(s) base URL such as http://127.0.0.1:8080, got {value:?}")
    };
    let url = reqwest::Url::parse(value).map_err(|_| bad())?;
    if !matches!(url.scheme(), "http" | "https") || url.query().is_some() || !url.has_host() {
        return Err(bad());
    }
    Ok(value.trim_end_matches('/').to_string())
}

/// The settings from the arguments and the environment, or the line saying what is wrong.
fn settings() -> Result<(String, App), String> {
    let mut args = std::env::args().skip(1);
    let addr = args.next().unwrap_or_else(|| "127.0.0.1:3000".into());
    if let Some(extra) = args.next() {
        return Err(format!("unexpected argument {extra:?}; see --help"));
    }
    if addr.starts_with('-') {
        return Err(format!("unknown option {addr:?}; see --help"));
    }
    let port_ok = addr
        .rsplit_once(':')
        .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
    if !port_ok {
        return Err(format!(
            "ADDR must be HOST:PORT such as 127.0.0.1:3000, got {addr:?}"
        ));
    }
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
    let need = |name: &str, what: &str| {
        var(name).ok_or_else(|| format!("{name} is not set ({what}); see --help"))
    };
    let server = need(
        "FREEWAY_URL",
        "freeway's base URL as this server reaches it",
    )?;
    let server = base_url("FREEWAY_URL", &server)?;
    let public = match var("FREEWAY_PUBLIC_URL") {
        Some(public) => base_url("FREEWAY_PUBLIC_URL", &public)?,
        None => server.clone(),
    };
    let token = need("FREEWAY_API_TOKEN", "freeway's API token")?;
    let provider = var("FREEWAY_PROVIDER").unwrap_or_else(|| "openrouter".into());
    let provider_ok = provider.len() <= 64
        && provider
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-');
    if !provider_ok {
        return Err(format!(
            "FREEWAY_PROVIDER must be a provider's name (1-64 of [a-z0-9_-]), got {provider:?}"
        ));
    }
    let model = var("FREEWAY_MODEL").unwrap_or_else(|| "openrouter/free".into());
    let http = reqwest::Client::builder()
        .timeout(FREEWAY_TIMEOUT)
        .build()
        .map_err(|e| format!("cannot make an HTTP client: {e}"))?;
    let app = App {
        http,
        server,
        public,
        token,
        provider,
        model,
    };
    Ok((addr, app))
}

#[tokio::main]
async fn main() {
    if std::env::args().skip(1).any(|a| a == "--help" || a == "-h") {
        print!("{USAGE}");
        return;
    }
    freeway::provider::install_crypto();
    let (addr, app) = match settings() {
        Ok(settings) => settings,
        Err(e) => {
            eprintln!("webapp: {e}");
            std::process::exit(2)
        }
    };
    let router = axum::Router::new()
        .route("/", get(page))
        .route("/ask", post(ask))
        .route("/events-check", post(check_events))
        .with_state(Arc::new(app));
    let listener = match tokio::net::TcpListener::bind(&addr).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("webapp: cannot listen on {addr}: {e}");
            std::process::exit(1)
        }
    };
    eprintln!("webapp: http://{addr}");
    if let Err(e) = axum::serve(listener, router).await {
        eprintln!("webapp: {e}");
    }
}
