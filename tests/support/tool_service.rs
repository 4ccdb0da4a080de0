//! A tool service for the engine's tool tests (`FREEWAY_TOOL_URL`): `POST /{name}` records the
//! request and answers `{"content": "NAME ran with ARGUMENTS"}`.

use axum::extract::{Path, State};
use axum::routing::post;
use axum::{Json, Router};
use std::sync::{Arc, Mutex};

/// One request the service received.
#[derive(Debug, Clone)]
pub(crate) struct ToolRequest {
    pub name: String,
    pub tool_call_id: String,
    pub arguments: serde_json::Value,
}

type Log = Arc<Mutex<Vec<ToolRequest>>>;

pub(crate) struct ToolService {
    pub url: String,
    log: Log,
}

impl ToolService {
    pub(crate) async fn start() -> ToolService {
        let log = Log::default();
        let app = Router::new()
            .route("/{name}", post(run))
            .with_state(log.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        ToolService { url, log }
    }

    pub(crate) fn requests(&self) -> Vec<ToolRequest> {
        self.log.lock().unwrap().clone()
    }
}

async fn run(
    State(log): State<Log>,
    Path(name): Path<String>,
    Json(body): Json<serde_json::Value>,
) -> Json<serde_json::Value> {
    let request = ToolRequest {
        name: name.clone(),
        tool_call_id: body["tool_call_id"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        arguments: body["arguments"].clone(),
    };
    let content = format!("{name} ran with {}", request.arguments);
    log.lock().unwrap().push(request);
    Json(serde_json::json!({ "content": content }))
}
