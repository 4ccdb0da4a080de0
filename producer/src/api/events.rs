//! `GET /v1/runs/{id}/events`: the run's Redis stream relayed as Server-Sent Events (SPEC §5.1).
//!
//! Each SSE event carries the stream entry's id (`id:`), the event type (`event:`) and the event
//! JSON (`data:`), so a client that reconnects with `Last-Event-ID` resumes right after the last
//! event it saw. The response ends after `finished`, `refused` or `awaiting_approval` (at once
//! for a client that resumes after one of them); it also ends when the run is settled and its
//! stream has nothing more to give (the stream expired, or the terminal event was never
//! published), and when the server shuts down. Idle streams get keep-alive comments.

use super::AppState;
use super::error::{ApiError, PathParams};
use super::user::ForUser;
use crate::stream::{Entry, Reader, parse_event_id};
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use freeway::store::Store;
use futures_util::Stream;
use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

const KEEP_ALIVE: Duration = Duration::from_secs(15);
/// A settled run whose stream ends without a terminal event (its publish failed) is over once
/// it has been settled this long: the terminal event would have come by then.
const SETTLE_GRACE_MS: u64 = 5_000;

pub async fn stream(
    State(state): State<Arc<AppState>>,
    PathParams(id): PathParams<String>,
    user: ForUser,
    headers: HeaderMap,
) -> Result<Sse<impl Stream<Item = Result<SseEvent, Infallible>>>, ApiError> {
    let after = match headers.get("last-event-id") {
        None => None,
        Some(v) => {
            let text = v
                .to_str()
                .map_err(|_| ApiError::InvalidRequest("Last-Event-ID is not text".into()))?;
            Some(parse_event_id(text).map_err(|e| ApiError::InvalidRequest(e.to_string()))?)
        }
    };
    user.run(&state.store, &id).await?;
    let resumed = after.is_some();
    let mut reader = Reader::open(&state.redis, state.enqueuer.namespace(), &id, after).await?;
    // A client that resumes after the last event has seen the whole story.
    let done = resumed && reader.current().await?.is_some_and(|e| e.is_last());
    let relay = Relay {
        state,
        run_id: id,
        reader,
        pending: VecDeque::new(),
        done,
        check_over: true,
    };
    let events = futures_util::stream::unfold(relay, Relay::next);
    Ok(Sse::new(events).keep_alive(KeepAlive::new().interval(KEEP_ALIVE)))
}

struct Relay {
    state: Arc<AppState>,
    run_id: String,
    reader: Reader,
    pending: VecDeque<Entry>,
    done: bool,
    /// Ask [`Relay::over`] before the first wait: a settled run whose stream expired closes at
    /// once instead of one block later.
    check_over: bool,
}

impl Relay {
    async fn next(mut self) -> Option<(Result<SseEvent, Infallible>, Relay)> {
        loop {
            if let Some(entry) = self.pending.pop_front() {
                if entry.is_last() {
                    self.done = true;
                    self.pending.clear();
                }
                match to_sse(&entry) {
                    Some(event) => return Some((Ok(event), self)),
                    None => continue,
                }
            }
            if self.done {
                return None;
            }
            if std::mem::take(&mut self.check_over) && self.over().await {
                return None;
            }
            let state = self.state.clone();
            let batch = tokio::select! {
                () = state.shutting_down() => return None,
                batch = self.reader.next_batch() => batch,
            };
            match batch {
                Ok(entries) if entries.is_empty() => {
                    if self.over().await {
                        return None;
                    }
                }
                Ok(entries) => self.pending.extend(entries),
                Err(error) => {
                    tracing::warn!(run_id = %self.run_id, %error, "event stream read failed");
                    return None;
                }
            }
        }
    }

    /// Nothing came for a while: is there nothing more to come?
    async fn over(&mut self) -> bool {
        let run = match self.state.store.run(&self.run_id).await {
            Ok(Some(run)) if run.status.is_settled() => run,
            Ok(_) => return false,
            Err(error) => {
                tracing::warn!(run_id = %self.run_id, %error, "cannot read the run");
                return false;
            }
        };
        match self.reader.newest().await {
            Ok(None) => true,
            Ok(Some(newest)) => {
                let settled_for = freeway::clock::epoch_ms().saturating_sub(run.updated_ms);
                newest.id == self.reader.position()
                    && (newest.is_last() || settled_for > SETTLE_GRACE_MS)
            }
            Err(error) => {
                tracing::warn!(run_id = %self.run_id, %error, "event stream read failed");
                true
            }
        }
    }
}

/// The SSE form of an entry; `None` for an entry no SSE field can carry (a type with a line
/// break, which freeway never writes).
fn to_sse(entry: &Entry) -> Option<SseEvent> {
    let printable = |s: &str| !s.is_empty() && !s.chars().any(char::is_control);
    if !printable(&entry.kind) || !printable(&entry.id) {
        tracing::warn!(id = %entry.id, "skipping a stream entry that SSE cannot carry");
        return None;
    }
    Some(
        SseEvent::default()
            .id(&entry.id)
            .event(&entry.kind)
            .data(&entry.data),
    )
}
