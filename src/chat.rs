//! The conversation vocabulary shared by the provider client, the engine and the store:
//! messages in the OpenAI chat format, tool calls, tool specs and usage.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The fields of an assistant turn a provider requires back on the next request, kept verbatim
/// (docs/design.md §2.3): OpenRouter's `reasoning_details`, `reasoning_content`. Without them a
/// reasoning model's next step of a tool loop can be refused.
pub const TURN_FIELDS: [&str; 2] = ["reasoning_details", "reasoning_content"];

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum Role {
    System,
    User,
    Assistant,
    Tool,
}

/// One tool call the model asked for. `arguments` is the raw JSON text the model produced (it may
/// be empty or malformed: models are not trusted to produce valid JSON).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    pub arguments: String,
    /// Provider data that must come back with the call (Gemini's
    /// `extra_content.google.thought_signature`), verbatim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra_content: Option<Value>,
}

/// A message of the transcript, in the shape the chat-completions API takes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Message {
    pub role: Role,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// [`TURN_FIELDS`] the provider returned on this assistant turn, sent back verbatim.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub turn_fields: Map<String, Value>,
}

impl Message {
    pub fn system(text: impl Into<String>) -> Self {
        Self {
            role: Role::System,
            content: Some(text.into()),
            tool_calls: vec![],
            tool_call_id: None,
            turn_fields: Map::new(),
        }
    }
    pub fn user(text: impl Into<String>) -> Self {
        Self {
            role: Role::User,
            content: Some(text.into()),
            tool_calls: vec![],
            tool_call_id: None,
            turn_fields: Map::new(),
        }
    }
    pub fn assistant(text: Option<String>, tool_calls: Vec<ToolCall>) -> Self {
        Self {
            role: Role::Assistant,
            content: text,
            tool_calls,
            tool_call_id: None,
            turn_fields: Map::new(),
        }
    }
    pub fn tool_result(tool_call_id: impl Into<String>, content: impl Into<String>) -> Self {
        Self {
            role: Role::Tool,
            content: Some(content.into()),
            tool_calls: vec![],
            tool_call_id: Some(tool_call_id.into()),
            turn_fields: Map::new(),
        }
    }
}

/// Whether the worker runs a tool itself or pauses the run for a person's approval.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum Approval {
    #[default]
    None,
    Required,
}

/// A tool as the job declares it (docs/design.md §2.4).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ToolSpec {
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default = "empty_object_schema")]
    pub parameters: serde_json::Value,
    #[serde(default)]
    pub approval: Approval,
}

fn empty_object_schema() -> serde_json::Value {
    serde_json::json!({"type": "object", "properties": {}})
}

/// The characters of `messages` a provider reads: their text and their tool calls' names and
/// arguments.
pub fn text_len(messages: &[Message]) -> usize {
    messages
        .iter()
        .map(|m| {
            let calls: usize = m
                .tool_calls
                .iter()
                .map(|c| c.name.len() + c.arguments.len())
                .sum();
            m.content.as_ref().map_or(0, String::len) + calls
        })
        .sum()
}

/// Token usage of one call, as far as the provider reported it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Usage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub total_tokens: u64,
}

impl Usage {
    /// Counts come from providers: a run's total saturates rather than overflowing on absurd ones.
    pub fn add(&mut self, other: Usage) {
        self.prompt_tokens = self.prompt_tokens.saturating_add(other.prompt_tokens);
        self.completion_tokens = self
            .completion_tokens
            .saturating_add(other.completion_tokens);
        self.total_tokens = self.total_tokens.saturating_add(other.total_tokens);
    }
}
