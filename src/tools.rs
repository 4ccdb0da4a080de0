//! Running tools for the model (docs/design.md §2.4): `POST {FREEWAY_TOOL_URL}/{name}`.
//!
//! A tool's failure is not a run's failure: the error text goes back to the model as the tool
//! result, so the model can say what went wrong.

use crate::chat::ToolCall;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// The longest a tool may take.
pub const TOOL_TIMEOUT: Duration = Duration::from_secs(30);
const MAX_TOOL_RESPONSE: usize = 256 * 1024;

/// Who asked for the tool: sent along so the tool can check permissions.
#[derive(Debug, Clone, Serialize)]
pub struct ToolContext<'a> {
    pub run_id: &'a str,
    pub user_id: &'a str,
    pub conversation_id: &'a str,
}

#[derive(Serialize)]
struct ToolRequest<'a> {
    run_id: &'a str,
    user_id: &'a str,
    conversation_id: &'a str,
    tool_call_id: &'a str,
    arguments: serde_json::Value,
}

#[derive(Deserialize)]
struct ToolResponse {
    content: serde_json::Value,
}

/// Where tools run; the default has no tool service (`FREEWAY_TOOL_URL` unset).
#[derive(Clone, Default)]
pub struct ToolRunner {
    /// The service's base URL and the client that calls it.
    service: Option<(String, reqwest::Client)>,
}

impl ToolRunner {
    pub fn new(base_url: Option<String>) -> Result<ToolRunner, reqwest::Error> {
        let Some(base_url) = base_url else {
            return Ok(ToolRunner::default());
        };
        crate::provider::install_crypto();
        let http = reqwest::Client::builder().timeout(TOOL_TIMEOUT).build()?;
        Ok(ToolRunner {
            service: Some((base_url, http)),
        })
    }

    /// The tool's result text, or the error text when it failed.
    pub async fn run(&self, ctx: &ToolContext<'_>, call: &ToolCall) -> String {
        let Some((base, http)) = &self.service else {
            return format!(
                "error: tool {} cannot run: FREEWAY_TOOL_URL is not set",
                call.name
            );
        };
        // Models produce broken JSON now and then; the tool still gets the text.
        let arguments = serde_json::from_str(&call.arguments)
            .unwrap_or_else(|_| serde_json::Value::String(call.arguments.clone()));
        let body = ToolRequest {
            run_id: ctx.run_id,
            user_id: ctx.user_id,
            conversation_id: ctx.conversation_id,
            tool_call_id: &call.id,
            arguments,
        };
        let Ok(body) = serde_json::to_vec(&body) else {
            return "error: could not encode the tool request".to_string();
        };
        let response = http
            .post(format!("{base}/{}", call.name))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await;
        let response = match response {
            Ok(r) => r,
            Err(e) if e.is_timeout() => return format!("error: tool {} timed out", call.name),
            Err(_) => return format!("error: tool {} is unreachable", call.name),
        };
        let status = response.status();
        let bytes = match response.bytes().await {
            Ok(b) if b.len() <= MAX_TOOL_RESPONSE => b,
            Ok(_) => {
                return format!(
                    "error: tool {} answered more than {MAX_TOOL_RESPONSE} bytes",
                    call.name
                );
            }
            Err(_) => return format!("error: tool {} broke off its answer", call.name),
        };
        if !status.is_success() {
            return format!(
                "error: tool {} answered HTTP {}: {}",
                call.name,
                status.as_u16(),
                String::from_utf8_lossy(&bytes)
            );
        }
        match serde_json::from_slice::<ToolResponse>(&bytes) {
            Ok(ToolResponse {
                content: serde_json::Value::String(s),
            }) => s,
            Ok(ToolResponse { content }) => content.to_string(),
            Err(_) => format!(
                "error: tool {} answered without a JSON {{content}}",
                call.name
            ),
        }
    }
}
