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

/// The settings, shared with the TypeScript twin (`examples/webapp-ts/`).
const USAGE: &str = include_str!("../../examples/webapp/usage.txt");
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
const PAGE: &str = include_str!("../../examples/webapp/page.html");

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
