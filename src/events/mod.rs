//! Run events (docs/design.md §2.5): what a run tells the web app while it happens.
//!
//! Every event goes to the run's Redis Stream `{ns}:{events:<shard>}:run:{run_id}:events` ([`stream_key`]), trimmed, and set to
//! expire [`DEFAULT_EVENTS_KEEP_S`] (`FREEWAY_EVENTS_KEEP_S`) after the run's last event, rewritten
//! then at its true size (`last.lua`: a short run's stream keeps about a kilobyte, not the 4 KB
//! Redis gives a stream up front). The
//! API relays the stream as Server-Sent Events; a reader that comes later is told the run's
//! last event from the store ([`Event::last_of`]), so Redis keeps nothing of a run past that.

use crate::chat::{ToolCall, Usage};
use crate::classify::Verdict;
use crate::connect::RedisConnection;
use crate::run::{Code, RunRecord, RunStatus};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use std::sync::{LazyLock, Mutex};

/// How long a run's events stay in Redis after its last event, unless `FREEWAY_EVENTS_KEEP_S`
/// says otherwise.
pub const DEFAULT_EVENTS_KEEP_S: u64 = 3600;
/// How long past its deadline a run's `events_url` opens its stream (from the store once Redis
/// has let go of it).
pub const EVENTS_URL_GRACE_S: u64 = 24 * 3600;
/// The most entries a run's stream keeps (approximately).
const STREAM_MAXLEN: usize = 10_000;
/// The longest stream `last.lua` rewrites at its true size: about one node's worth (Redis's
/// `stream-node-max-entries`), so the rewrite stays a few kilobytes.
const REWRITE_MAX_ENTRIES: usize = 100;

/// The fields of a stream entry, here and in `last.lua`: the event's type, and the event as JSON.
const TYPE_FIELD: &str = "type";
const DATA_FIELD: &str = "data";

static LAST: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(include_str!("last.lua")));

/// One run event, as the worker publishes it and every reader (the SSE relay, the CLI, the
/// board) parses it back: one type on every side, so no reader matches strings in JSON.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Event {
    #[cfg_attr(feature = "openapi", schema(title = "QueuedEvent"))]
    Queued,
    #[cfg_attr(feature = "openapi", schema(title = "DelayedEvent"))]
    Delayed { until_ms: u64, reason: String },
    #[cfg_attr(feature = "openapi", schema(title = "StartedEvent"))]
    Started { worker: String },
    /// The run waits in place (`wait_for_free_s`) for a full pool's next slot, until then.
    #[cfg_attr(feature = "openapi", schema(title = "WaitingEvent"))]
    Waiting { until_ms: u64, reason: String },
    #[cfg_attr(feature = "openapi", schema(title = "AttemptEvent"))]
    Attempt { n: u32, step: u32, route: String },
    #[cfg_attr(feature = "openapi", schema(title = "FailoverEvent"))]
    Failover {
        from: String,
        to: Option<String>,
        verdict: Verdict,
    },
    #[cfg_attr(feature = "openapi", schema(title = "DeltaEvent"))]
    Delta { text: String },
    #[cfg_attr(feature = "openapi", schema(title = "ToolCallEvent"))]
    ToolCall {
        id: String,
        name: String,
        arguments: String,
    },
    #[cfg_attr(feature = "openapi", schema(title = "ToolResultEvent"))]
    ToolResult { id: String, content: String },
    #[cfg_attr(feature = "openapi", schema(title = "AwaitingApprovalEvent"))]
    AwaitingApproval { tool_call: ToolCall },
    #[cfg_attr(feature = "openapi", schema(title = "RefusedEvent"))]
    Refused { code: Code, retry_after_s: u64 },
    #[cfg_attr(feature = "openapi", schema(title = "FinishedEvent"))]
    Finished {
        status: RunStatus,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        code: Option<Code>,
        usage: Usage,
    },
    /// The run was cancelled, before it started or before its next call, by `by` (the
    /// credential that asked; absent when told from the store, which does not keep it).
    #[cfg_attr(feature = "openapi", schema(title = "CancelledEvent"))]
    Cancelled {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        by: Option<String>,
    },
}

impl Event {
    /// The event's `type` field.
    pub fn kind(&self) -> &'static str {
        match self {
            Event::Queued => "queued",
            Event::Delayed { .. } => "delayed",
            Event::Started { .. } => "started",
            Event::Waiting { .. } => "waiting",
            Event::Attempt { .. } => "attempt",
            Event::Failover { .. } => "failover",
            Event::Delta { .. } => "delta",
            Event::ToolCall { .. } => "tool_call",
            Event::ToolResult { .. } => "tool_result",
            Event::AwaitingApproval { .. } => "awaiting_approval",
            Event::Refused { .. } => "refused",
            Event::Finished { .. } => "finished",
            Event::Cancelled { .. } => "cancelled",
        }
    }

    /// Output events: after one of these, a run never fails over.
    pub fn is_output(&self) -> bool {
        matches!(
            self,
            Event::Delta { .. } | Event::ToolCall { .. } | Event::ToolResult { .. }
        )
    }

    /// The last event a settled run published, as its record tells it: what a reader is served
    /// from the store when the stream never got it (Redis was away as the run ended) or has
    /// expired. `None` for a run that is not settled.
    pub fn last_of(run: &RunRecord) -> Option<Event> {
        match run.status {
            RunStatus::Succeeded | RunStatus::Failed => Some(Event::Finished {
                status: run.status,
                code: run.code,
                usage: run.usage,
            }),
            RunStatus::Refused => Some(Event::Refused {
                // A refused run always has its code; a record without one reads as exhausted.
                code: run.code.unwrap_or(Code::RoutesExhausted),
                retry_after_s: 0,
            }),
            RunStatus::AwaitingApproval => run
                .pending_tool_call
                .clone()
                .map(|tool_call| Event::AwaitingApproval { tool_call }),
            RunStatus::Cancelled => Some(Event::Cancelled { by: None }),
            RunStatus::Queued | RunStatus::Delayed | RunStatus::Running => None,
        }
    }

    /// The events after which a run's stream has nothing more to say for this job.
    pub fn is_last(&self) -> bool {
        matches!(
            self,
            Event::Finished { .. }
                | Event::Refused { .. }
                | Event::AwaitingApproval { .. }
                | Event::Cancelled { .. }
        )
    }

    /// An event as a stream entry's `data` holds it; `None` for text that is not one.
    pub fn from_json(data: &str) -> Option<Event> {
        serde_json::from_str(data).ok()
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|_| format!("{{\"type\":\"{}\"}}", self.kind()))
    }
}

/// An event could not be published; what failed is kept as the error's source.
#[derive(Debug, thiserror::Error)]
#[error("publishing an event: {0}")]
pub struct EventError(#[source] Box<dyn std::error::Error + Send + Sync>);

impl EventError {
    /// For sinks outside this module: why an event could not be published (an error, or words).
    pub fn new(why: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> EventError {
        EventError(why.into())
    }
}

impl From<redis::RedisError> for EventError {
    fn from(e: redis::RedisError) -> EventError {
        EventError(Box::new(e))
    }
}

#[async_trait]
pub trait EventSink: Send + Sync {
    async fn publish(&self, run_id: &str, event: &Event) -> Result<(), EventError>;
}

/// How many hash tags the runs' event streams are spread over.
pub const EVENT_SHARDS: u32 = 16;

/// The stream key of a run's events. Its hash tag is one of [`EVENT_SHARDS`], by the run's id:
/// on a cluster one `XREAD` can only name streams of one slot, and a process that follows a
/// thousand runs reads them in at most sixteen reads, not a thousand.
pub fn stream_key(ns: &str, run_id: &str) -> String {
    format!(
        "{ns}:{{events:{}}}:run:{run_id}:events",
        crate::connect::shard_of(run_id, EVENT_SHARDS)
    )
}

/// One entry of a run's stream as it was written: the event's type and its JSON (relayed as
/// they are), and the event they hold, read once (`None` for data that is not one).
#[derive(Debug, Clone, PartialEq)]
pub struct StoredEvent {
    pub kind: String,
    pub data: String,
    pub event: Option<Event>,
}

impl StoredEvent {
    /// An entry of a run's stream as `XREAD` or `XRANGE` return it; the one place that reads
    /// the fields [`RedisEvents`] writes.
    pub fn read(entry: &redis::streams::StreamId) -> StoredEvent {
        let data: String = entry.get(DATA_FIELD).unwrap_or_default();
        StoredEvent {
            kind: entry.get(TYPE_FIELD).unwrap_or_default(),
            event: Event::from_json(&data),
            data,
        }
    }
}

/// Publishes events to the run's Redis Stream.
#[derive(Clone)]
pub struct RedisEvents {
    conn: RedisConnection,
    ns: String,
    keep_s: u64,
}

impl RedisEvents {
    pub fn new(conn: RedisConnection, ns: impl Into<String>) -> Self {
        Self {
            conn,
            ns: ns.into(),
            keep_s: DEFAULT_EVENTS_KEEP_S,
        }
    }

    /// Keep a run's stream `keep_s` after its last event (`FREEWAY_EVENTS_KEEP_S`).
    pub fn keeping(mut self, keep_s: u64) -> Self {
        self.keep_s = keep_s;
        self
    }
}

#[async_trait]
impl EventSink for RedisEvents {
    async fn publish(&self, run_id: &str, event: &Event) -> Result<(), EventError> {
        let key = stream_key(&self.ns, run_id);
        let mut conn = self.conn.clone();
        let written = if event.is_last() {
            LAST.key(&key)
                .arg(STREAM_MAXLEN)
                .arg(event.kind())
                .arg(event.to_json())
                .arg(self.keep_s)
                .arg(REWRITE_MAX_ENTRIES)
                .invoke_async::<()>(&mut conn)
                .await
        } else {
            redis::cmd("XADD")
                .arg(&key)
                .arg("MAXLEN")
                .arg("~")
                .arg(STREAM_MAXLEN)
                .arg("*")
                .arg(TYPE_FIELD)
                .arg(event.kind())
                .arg(DATA_FIELD)
                .arg(event.to_json())
                .query_async::<()>(&mut conn)
                .await
        };
        written.map_err(EventError::from)
    }
}

/// Keeps every event published, in order, in this process: for tests that need no server.
#[derive(Default)]
pub struct MemoryEvents(Mutex<Vec<(String, Event)>>);

impl MemoryEvents {
    /// The events of one run, in the order they were published.
    pub fn of(&self, run_id: &str) -> Vec<Event> {
        let all = self.0.lock().unwrap_or_else(|e| e.into_inner());
        all.iter()
            .filter(|(r, _)| r == run_id)
            .map(|(_, e)| e.clone())
            .collect()
    }
}

#[async_trait]
impl EventSink for MemoryEvents {
    async fn publish(&self, run_id: &str, event: &Event) -> Result<(), EventError> {
        let mut all = self.0.lock().unwrap_or_else(|e| e.into_inner());
        all.push((run_id.to_string(), event.clone()));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every variant, as a reader parses back what a worker wrote, with its wire form.
    #[test]
    fn every_event_reads_back_as_it_was_written() {
        let call = ToolCall {
            id: "call_1".into(),
            name: "lookup".into(),
            arguments: "{}".into(),
            extra_content: None,
        };
        let events = [
            (Event::Queued, r#"{"type":"queued"}"#),
            (
                Event::Failover {
                    from: "platform:openrouter/a:free".into(),
                    to: None,
                    verdict: Verdict::Account,
                },
                r#"{"type":"failover","from":"platform:openrouter/a:free","to":null,"verdict":"account"}"#,
            ),
            (
                Event::Refused {
                    code: Code::AccountResting,
                    retry_after_s: 7,
                },
                r#"{"type":"refused","code":"account_resting","retry_after_s":7}"#,
            ),
            (
                Event::Finished {
                    status: RunStatus::Failed,
                    code: Some(Code::ConnectionMissing),
                    usage: Usage::default(),
                },
                r#"{"type":"finished","status":"failed","code":"connection_missing","usage":{"prompt_tokens":0,"completion_tokens":0,"total_tokens":0}}"#,
            ),
        ];
        for (event, wire) in events {
            assert_eq!(event.to_json(), wire);
            assert_eq!(Event::from_json(wire), Some(event));
        }
        for event in [
            Event::Delayed {
                until_ms: 5,
                reason: "pool".into(),
            },
            Event::Started { worker: "w".into() },
            Event::Attempt {
                n: 1,
                step: 1,
                route: "r".into(),
            },
            Event::Delta { text: "é".into() },
            Event::ToolCall {
                id: "c".into(),
                name: "n".into(),
                arguments: "{".into(),
            },
            Event::ToolResult {
                id: "c".into(),
                content: "x".into(),
            },
            Event::AwaitingApproval { tool_call: call },
        ] {
            assert_eq!(Event::from_json(&event.to_json()), Some(event));
        }
        assert_eq!(Event::from_json(r#"{"type":"nosuch"}"#), None);
        assert_eq!(Event::from_json("not json"), None);
    }

    /// A stream entry reads back as the fields the sink writes: the type and the JSON as stored,
    /// and the event parsed once; data that is not an event is kept, unparsed.
    #[test]
    fn a_stream_entry_is_read_by_the_fields_the_sink_writes() {
        let entry = |fields: &[(&str, &str)]| redis::streams::StreamId {
            id: "1-0".into(),
            map: fields
                .iter()
                .map(|(k, v)| {
                    (
                        k.to_string(),
                        redis::Value::BulkString(v.as_bytes().to_vec()),
                    )
                })
                .collect(),
            ..Default::default()
        };
        let json = Event::Queued.to_json();
        let stored = StoredEvent::read(&entry(&[(TYPE_FIELD, "queued"), (DATA_FIELD, &json)]));
        assert_eq!(stored.kind, "queued");
        assert_eq!(stored.data, json);
        assert_eq!(stored.event, Some(Event::Queued));
        let garbled = StoredEvent::read(&entry(&[(TYPE_FIELD, "queued"), (DATA_FIELD, "{nope")]));
        assert_eq!((garbled.data.as_str(), garbled.event), ("{nope", None));
        let empty = StoredEvent::read(&entry(&[]));
        assert_eq!(
            (empty.kind.as_str(), empty.data.as_str(), empty.event),
            ("", "", None)
        );
    }
}
