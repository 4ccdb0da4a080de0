//! Folding a stream's chunk payloads into one [`Completion`]: text deltas relayed as they come,
//! tool calls put together from fragments keyed by `index`, usage wherever it arrives, and every
//! shape of an error inside the 200 stream made a classified failure. Text-only chunks take the
//! borrowed path of `text`; any other goes through a `serde_json::Value`.

use super::text::{Object, Text, TextChunk};
use crate::chat::ToolCall;
use crate::provider::wire::{self, malformed};
use crate::provider::{CallError, Completion, TransportError};
use serde_json::Value;
use std::collections::HashMap;

/// Whether more of the stream is wanted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::provider) enum Progress {
    More,
    /// `data: [DONE]` arrived; anything after it is ignored.
    Done,
}

/// A tool call being put together from its deltas.
#[derive(Debug, Default)]
struct PartialCall {
    id: String,
    name: String,
    arguments: String,
    extra_content: Option<Value>,
}

/// Folds chunk payloads into one completion.
#[derive(Debug, Default)]
pub(super) struct StreamAssembler {
    /// What the chunks made so far (the tests beside the parser compare two assemblers' by it).
    pub(super) completion: Completion,
    /// The calls in the order they started.
    calls: Vec<PartialCall>,
    /// A delta's `index` → the call it continues.
    by_index: HashMap<u64, usize>,
}

impl StreamAssembler {
    /// Takes one event payload. Text deltas go to `on_text` as they arrive.
    pub(super) fn event(
        &mut self,
        data: &str,
        on_text: &mut dyn FnMut(&str),
    ) -> Result<Progress, CallError> {
        if data.trim() == "[DONE]" {
            return Ok(Progress::Done);
        }
        // Nearly every chunk is a piece of text: read into borrowed fields, it costs no tree of
        // the JSON (a dozen allocations a chunk, most of a stream's parsing).
        if let Ok(Object(chunk)) = serde_json::from_str::<Object<TextChunk<'_>>>(data)
            && chunk.is_plain()
        {
            self.text_chunk(chunk, on_text);
            return Ok(Progress::More);
        }
        self.any_event(data, on_text)
    }

    /// A chunk [`TextChunk::is_plain`] says is text: what [`StreamAssembler::any_event`] makes
    /// of it.
    fn text_chunk(&mut self, chunk: TextChunk<'_>, on_text: &mut dyn FnMut(&str)) {
        let c = &mut self.completion;
        for (slot, value) in [
            (&mut c.id, chunk.id),
            (&mut c.model, chunk.model),
            (&mut c.provider_name, chunk.provider),
        ] {
            if slot.is_none() {
                *slot = value.and_then(Text::non_empty);
            }
        }
        // Only the first choice is asked for (no `n`), as in the general path.
        let choices = chunk.choices.iter().flatten();
        for Object(choice) in choices.filter(|c| c.0.index.unwrap_or(0) == 0) {
            if let Some(reason) = choice.finish_reason.clone().and_then(Text::non_empty) {
                c.finish_reason = Some(reason);
            }
            let text = choice.delta.as_ref().and_then(|d| d.0.content.as_ref());
            if let Some(Text(text)) = text.filter(|t| !t.0.is_empty()) {
                c.text.push_str(text);
                on_text(text);
            }
        }
    }

    /// Any event payload, in every shape the wire has.
    pub(super) fn any_event(
        &mut self,
        data: &str,
        on_text: &mut dyn FnMut(&str),
    ) -> Result<Progress, CallError> {
        let chunk: Value = serde_json::from_str(data)
            .map_err(|e| malformed(format!("stream chunk is not JSON: {e}")))?;
        if !chunk.is_object() {
            return Err(malformed("stream chunk is not a JSON object"));
        }
        let c = &mut self.completion;
        for (slot, key) in [
            (&mut c.id, "id"),
            (&mut c.model, "model"),
            (&mut c.provider_name, "provider"),
        ] {
            if slot.is_none() {
                *slot = wire::str_field(&chunk, key);
            }
        }
        // Layout 2 of a mid-stream error has `choices: []`, so the top-level error decides.
        if let Some(error) = chunk.get("error").filter(|e| !e.is_null()) {
            return Err(self.in_band(wire::in_band_error(error)));
        }
        if wire::is_bare_error(&chunk) {
            return Err(self.in_band(wire::in_band_error(&chunk)));
        }
        if let Some(usage) = wire::usage(&chunk) {
            self.completion.usage = Some(usage);
            self.completion.cost_usd = wire::cost(&chunk);
        }
        let choices = match chunk.get("choices") {
            None | Some(Value::Null) => return Ok(Progress::More),
            Some(Value::Array(choices)) => choices,
            Some(_) => return Err(malformed("choices is not an array")),
        };
        // Only the first choice is asked for (no `n`); others, if any, are not ours.
        for choice in choices
            .iter()
            .filter(|c| c.get("index").and_then(Value::as_u64).unwrap_or(0) == 0)
        {
            self.choice(&chunk, choice, on_text)?;
        }
        Ok(Progress::More)
    }

    fn choice(
        &mut self,
        chunk: &Value,
        choice: &Value,
        on_text: &mut dyn FnMut(&str),
    ) -> Result<(), CallError> {
        if let Some(finish_reason) = wire::str_field(choice, "finish_reason") {
            if finish_reason == "error" {
                return Err(self.in_band(wire::finish_error(choice, chunk)));
            }
            self.completion.finish_reason = Some(finish_reason);
        }
        let Some(delta) = choice.get("delta").filter(|d| !d.is_null()) else {
            return Ok(());
        };
        if let Some(text) = wire::content_text(delta)?.filter(|t| !t.is_empty()) {
            self.completion.text.push_str(text);
            on_text(text);
        }
        self.turn_fields_delta(delta);
        match delta.get("tool_calls") {
            None | Some(Value::Null) => {}
            Some(Value::Array(calls)) => {
                for (position, call) in calls.iter().enumerate() {
                    self.tool_call_delta(call, position);
                }
            }
            Some(_) => return Err(malformed("delta.tool_calls is not an array")),
        }
        Ok(())
    }

    /// Streamed turn fields: `reasoning_details` arrive as array pieces (appended in order),
    /// `reasoning_content` as text pieces (joined).
    fn turn_fields_delta(&mut self, delta: &Value) {
        let fields = &mut self.completion.turn_fields;
        for (key, piece) in wire::turn_fields(delta) {
            match (fields.get_mut(&key), piece) {
                (Some(Value::Array(items)), Value::Array(more)) => items.extend(more),
                (Some(Value::String(text)), Value::String(more)) => text.push_str(&more),
                (_, piece) => {
                    fields.insert(key, piece);
                }
            }
        }
    }

    /// The first delta of a call carries `id` and `function.name`; later ones only `index` and a
    /// fragment of `function.arguments`. A delta with a new non-empty `id` starts a new call even
    /// when its `index` is missing or repeats one (Gemini sends parallel calls that way, one per
    /// chunk), so arguments are joined per call, never across calls.
    fn tool_call_delta(&mut self, call: &Value, position: usize) {
        let index = call
            .get("index")
            .and_then(Value::as_u64)
            .unwrap_or(position as u64);
        let id = wire::str_field(call, "id").filter(|id| !id.is_empty());
        let current = self.by_index.get(&index).copied();
        let slot = match (current, &id) {
            (Some(slot), Some(id))
                if !self.calls[slot].id.is_empty() && self.calls[slot].id != *id =>
            {
                None
            }
            (current, _) => current,
        };
        let slot = slot.unwrap_or_else(|| {
            self.calls.push(PartialCall::default());
            self.by_index.insert(index, self.calls.len() - 1);
            self.calls.len() - 1
        });
        let partial = &mut self.calls[slot];
        if let Some(id) = id {
            partial.id = id;
        }
        if let Some(extra) = call.get("extra_content").filter(|v| !v.is_null()) {
            partial.extra_content = Some(extra.clone());
        }
        let function = call.get("function").unwrap_or(&Value::Null);
        if let Some(name) = wire::str_field(function, "name") {
            partial.name = name;
        }
        partial
            .arguments
            .push_str(&wire::arguments_text(function.get("arguments")));
    }

    /// The data of an `event: error` frame, in whatever shape it comes: a chunk with an `error`
    /// object, a bare error object, or plain text. Its text is the message when it has none of
    /// its own, so that the attempt log says what the provider said.
    pub(super) fn error_event(&mut self, data: &str) -> CallError {
        let value = serde_json::from_str::<Value>(data)
            .unwrap_or_else(|_| Value::String(data.trim().to_owned()));
        let error = value
            .get("error")
            .filter(|e| !e.is_null())
            .unwrap_or(&value);
        let mut error = wire::in_band_error(error);
        if error.message.is_empty() {
            data.trim().clone_into(&mut error.message);
        }
        self.in_band(error)
    }

    fn in_band(&mut self, error: crate::provider::InBandError) -> CallError {
        CallError::InBand {
            error,
            partial: std::mem::take(&mut self.completion.text),
        }
    }

    /// The completion, once the stream is over. `done` says whether `[DONE]` arrived: without it
    /// the answer is complete only if a finish reason was seen.
    pub(super) fn finish(self, done: bool) -> Result<Completion, CallError> {
        if !done && self.completion.finish_reason.is_none() {
            return Err(CallError::Transport(TransportError::Truncated));
        }
        let mut completion = self.completion;
        for (n, call) in self.calls.into_iter().enumerate() {
            if call.name.is_empty() {
                return Err(malformed(format!(
                    "streamed tool call {n} has no function name"
                )));
            }
            // A zero-argument call may end with arguments "" (not "{}"): kept as sent.
            completion.tool_calls.push(ToolCall {
                id: call.id,
                name: call.name,
                arguments: call.arguments,
                extra_content: call.extra_content,
            });
        }
        Ok(completion)
    }
}
