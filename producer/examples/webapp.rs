//! A web app that streams a freeway run's answer in its users' browsers, without ever giving a
//! browser the API token.
//!
//! The app's server holds `FREEWAY_API_TOKEN` and enqueues a run for the user's question
//! (`POST /ask` → freeway's `POST /v1/runs`); it hands the browser only the run's signed
//! `events_url`, which opens that run's event stream and nothing else. The page subscribes with
//! `EventSource` and writes the answer as its deltas arrive. freeway must have
//! `FREEWAY_SECRET_KEY` (to sign the URL) and this app's origin in `FREEWAY_CORS_ORIGINS`.
//!
//! ```text
//! FREEWAY_URL=http://127.0.0.1:8080 FREEWAY_API_TOKEN=… \
//!   cargo run -p producer --example webapp -- 127.0.0.1:3000
//! ```
//!
//! `FREEWAY_MODEL` picks the route (default `openrouter/free`).

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};
use std::sync::Arc;

struct App {
    http: reqwest::Client,
    freeway: String,
    token: String,
    model: String,
}

/// The one page. It holds no secret: it asks this app for a run and reads the run's events
/// straight from freeway with the URL it is given.
const PAGE: &str = r#"<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>Ask</title>
<style>body{font-family:system-ui,sans-serif;max-width:40rem;margin:2rem auto;padding:0 1rem}
#answer{white-space:pre-wrap;border:1px solid #ccc;border-radius:6px;padding:.6rem;min-height:3rem}</style>
</head><body>
<h1>Ask</h1>
<form id="ask"><label for="q">Question</label> <input id="q" required> <button>Ask</button></form>
<p id="state" role="status"></p>
<div id="answer" aria-live="polite"></div>
<script>
document.getElementById('ask').addEventListener('submit', async (ev) => {
  ev.preventDefault();
  const answer = document.getElementById('answer'), state = document.getElementById('state');
  answer.textContent = ''; state.textContent = 'queued';
  const r = await fetch('/ask', { method: 'POST', headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ question: document.getElementById('q').value }) });
  const run = await r.json();
  if (!r.ok) { state.textContent = 'refused: ' + (run.error || r.status); return; }
  document.body.dataset.runId = run.run_id;
  document.body.dataset.eventsUrl = run.events_url;
  const events = new EventSource(run.events_url);
  events.addEventListener('delta', (e) => { answer.textContent += JSON.parse(e.data).text; });
  events.addEventListener('attempt', () => { state.textContent = 'answering'; });
  for (const end of ['finished', 'refused', 'cancelled', 'awaiting_approval']) {
    events.addEventListener(end, (e) => {
      const data = JSON.parse(e.data);
      state.textContent = data.status || end;
      events.close();
    });
  }
  events.onerror = () => { if (events.readyState === EventSource.CLOSED) state.textContent ||= 'closed'; };
});
</script>
</body></html>"#;

async fn page() -> Html<&'static str> {
    Html(PAGE)
}

/// Enqueue a run for the question, as the user `web-user` (a real app names its signed-in user),
/// and answer with the run's id and its events URL made absolute for the browser.
async fn ask(State(app): State<Arc<App>>, Json(body): Json<Value>) -> Response {
    let Some(question) = body["question"].as_str().filter(|q| !q.trim().is_empty()) else {
        return (
            StatusCode::BAD_REQUEST,
            Json(json!({"error": "a question is required"})),
        )
            .into_response();
    };
    let run = json!({
        "user_id": "web-user",
        "input": question,
        "routes": [{ "model": app.model }],
        "on_rest": "queue",
    });
    let sent = app
        .http
        .post(format!("{}/v1/runs", app.freeway))
        .bearer_auth(&app.token)
        .header("content-type", "application/json")
        .body(run.to_string())
        .send()
        .await;
    let reply = match sent {
        Ok(resp) => {
            let status = resp.status();
            let text = resp.text().await.unwrap_or_default();
            (
                status,
                serde_json::from_str::<Value>(&text).unwrap_or_default(),
            )
        }
        Err(e) => {
            return (
                StatusCode::BAD_GATEWAY,
                Json(json!({"error": e.to_string()})),
            )
                .into_response();
        }
    };
    match reply {
        (status, run) if status.as_u16() == 202 => {
            let url = format!(
                "{}{}",
                app.freeway,
                run["events_url"].as_str().unwrap_or_default()
            );
            Json(json!({ "run_id": run["run_id"], "events_url": url })).into_response()
        }
        (status, err) => {
            let code = StatusCode::from_u16(status.as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
            (code, Json(json!({ "error": err["error"]["message"] }))).into_response()
        }
    }
}

#[tokio::main]
async fn main() {
    let need = |var: &str| {
        std::env::var(var).unwrap_or_else(|_| {
            eprintln!("webapp: {var} is not set");
            std::process::exit(2)
        })
    };
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:3000".into());
    freeway::provider::install_crypto();
    let app = Arc::new(App {
        http: reqwest::Client::new(),
        freeway: need("FREEWAY_URL").trim_end_matches('/').to_string(),
        token: need("FREEWAY_API_TOKEN"),
        model: std::env::var("FREEWAY_MODEL").unwrap_or_else(|_| "openrouter/free".into()),
    });
    let router = axum::Router::new()
        .route("/", get(page))
        .route("/ask", post(ask))
        .with_state(app);
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
