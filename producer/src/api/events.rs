//! `GET /v1/runs/{id}/events`: the run's Redis stream relayed as Server-Sent Events (docs/api.md
//! §1).
//!
//! Each SSE event carries the stream entry's id (`id:`), the event type (`event:`) and the event
//! JSON (`data:`), so a client that reconnects with `Last-Event-ID` resumes right after the last
//! event it saw. The response ends after `finished`, `refused` or `awaiting_approval` (at once
//! for a client that resumes after one of them); it also ends when the run is settled and its
//! stream has nothing more to give (the stream expired, or the last event was never published
//! because Redis was away): then that last event is served from the store, without an `id:`,
//! before the end. It also ends when the server shuts down. Idle streams get keep-alive
//! comments.
//!
//! New entries come from the process's shared reader ([`crate::hub`]); what the client has not
//! seen from before it joined is read from the stream directly. Each open stream holds a slot of
//! [`AppState::stream_slots`] (`FREEWAY_MAX_STREAMS`, counted per run and per user): with none
//! free for it a new stream is refused with 503 and `Retry-After`, and a slot is free again when
//! its client goes away.

use super::auth::{presents_admin, require_api};
use super::error::{ApiError, PathParams};
use super::state::AppState;
use super::stream_slots::{self, Full, Reader, StreamSlot};
use super::user::ForUser;
use crate::hub::{Lost, Subscription};
use crate::stream::{self, BATCH, Entry, StreamId, parse_event_id};
use axum::extract::{Query, State, rejection::QueryRejection};
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use freeway::connect::RedisConnection;
use freeway::events::Event;
use freeway::run::RunRecord;
use freeway::store::Store;
use futures_util::Stream;
use serde::Deserialize;
use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

const KEEP_ALIVE: Duration = Duration::from_secs(15);
/// A stream with nothing new for this long asks whether its run is over.
const IDLE: Duration = Duration::from_secs(10);
/// A settled run whose stream ends without a terminal event (its publish failed) is over once
/// it has been settled this long: the terminal event would have come by then.
const SETTLE_GRACE_MS: u64 = 5_000;
/// When a client refused for want of a slot may try again.
const RETRY_AFTER_S: u64 = 5;

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct EventsQuery {
    user_id: Option<String>,
    /// The token of the run's signed `events_url`, instead of the API token.
    token: Option<String>,
}

/// The run's events, to a caller with the API token or the run's own signed token; a page of
/// one of `FREEWAY_CORS_ORIGINS` may read them.
#[utoipa::path(
    get, operation_id = "streamRunEvents", path = "/v1/runs/{id}/events", tag = "runs",
    params(("id" = String, Path, description = "The run id"), EventsQuery,
        ("Last-Event-ID" = Option<String>, Header, description = "Resume after this event")),
    responses(
        (status = 200, description = "Server-Sent Events: each `data:` is one event, its `event:` the event's `type`", content_type = "text/event-stream", body = freeway::events::Event),
        (status = 404, description = "No such run (or not the user's)", body = crate::api::error::ErrorBody),
    )
)]
pub async fn stream(
    State(state): State<Arc<AppState>>,
    PathParams(id): PathParams<String>,
    query: Result<Query<EventsQuery>, QueryRejection>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let Query(query) = query.map_err(|r| ApiError::InvalidRequest(r.body_text()))?;
    let signed = match (&query.token, &state.signer) {
        (Some(token), Some(signer)) => {
            signer
                .verify(&id, token, freeway::clock::epoch_ms())
                .map_err(|e| ApiError::Forbidden(e.to_string()))?;
            true
        }
        (Some(_), None) => {
            return Err(ApiError::Forbidden(
                "events tokens are not accepted: the server has no FREEWAY_SECRET_KEY".into(),
            ));
        }
        (None, _) => {
            require_api(&state.tokens, &headers)?;
            false
        }
    };
    let reader = match (&query.user_id, signed) {
        (_, false) if presents_admin(&state.tokens, &headers) => Reader::Operator,
        (Some(user), false) => Reader::User(user.clone()),
        _ => Reader::Anyone,
    };
    let user = ForUser::of(query.user_id)?;
    let events = relay(state.clone(), id, user, &reader, &headers).await?;
    let mut response = Sse::new(events)
        .keep_alive(KeepAlive::new().interval(KEEP_ALIVE))
        .into_response();
    allow_origin(&state, &headers, &mut response);
    Ok(response)
}

/// `Access-Control-Allow-Origin` for a page of a configured web app origin.
fn allow_origin(state: &AppState, headers: &HeaderMap, response: &mut Response) {
    let Some(origin) = headers.get(header::ORIGIN) else {
        return;
    };
    let allowed = origin
        .to_str()
        .is_ok_and(|o| state.cors_origins.iter().any(|c| c == o));
    if allowed {
        let out = response.headers_mut();
        out.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin.clone());
        out.insert(header::VARY, HeaderValue::from_static("Origin"));
    }
}

async fn relay(
    state: Arc<AppState>,
    id: String,
    user: ForUser,
    reader: &Reader,
    headers: &HeaderMap,
) -> Result<impl Stream<Item = Result<SseEvent, Infallible>> + use<>, ApiError> {
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
    let slot = state
        .stream_slots
        .take(&id, reader)
        .map_err(|full| ApiError::Busy {
            message: match full {
                Full::Process => "too many event streams are open".into(),
                Full::Run => format!(
                    "this run has {} event streams open already",
                    stream_slots::PER_RUN
                ),
                Full::User => "this user has its share of event streams open".into(),
            },
            retry_after_s: RETRY_AFTER_S,
        })?;
    let key = freeway::events::stream_key(state.fleet.namespace(), &id);
    let mut conn = state.fleet.connection();
    // A client that resumes after the last event has seen the whole story.
    let done = match after {
        Some(after) => stream::entry_at(&mut conn, &key, after)
            .await?
            .is_some_and(|e| e.is_last()),
        None => false,
    };
    // Joined here rather than at the first wait, so that a Redis outage is a 503.
    let feed = if done {
        None
    } else {
        Some(state.hub.join(&key).await?)
    };
    let relay = Relay {
        state,
        run_id: id,
        key,
        conn,
        backlog_until: feed.as_ref().map(Subscription::from),
        feed,
        last: after.unwrap_or(StreamId::ZERO),
        pending: VecDeque::new(),
        done,
        check_over: true,
        _slot: slot,
    };
    Ok(futures_util::stream::unfold(relay, Relay::next))
}

struct Relay {
    state: Arc<AppState>,
    run_id: String,
    key: String,
    /// The shared connection, for reads that do not block.
    conn: RedisConnection,
    /// The run's feed; `None` for a stream that is already over, or after falling behind it
    /// (the next wait joins it again).
    feed: Option<Subscription>,
    /// Entries from before the feed was joined, up to this one, are still to be read.
    backlog_until: Option<StreamId>,
    /// The last entry taken (sent or pending), or the client's `Last-Event-ID`.
    last: StreamId,
    pending: VecDeque<Entry>,
    done: bool,
    /// Ask [`Relay::over`] before the first wait: a settled run whose stream expired closes at
    /// once instead of one idle period later.
    check_over: bool,
    /// Held while the response is open.
    _slot: StreamSlot,
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
            if std::mem::take(&mut self.check_over) {
                match self.over().await {
                    Over::No => {}
                    Over::Ended => return None,
                    Over::Settled(run) => return self.last_from_store(&run),
                }
            }
            if self.feed.is_none() {
                match self.state.hub.join(&self.key).await {
                    Ok(feed) => {
                        self.backlog_until = Some(feed.from());
                        self.feed = Some(feed);
                    }
                    Err(error) => return self.failed(&error),
                }
            }
            if let Some(until) = self.backlog_until.filter(|&until| self.last < until) {
                match stream::range(&mut self.conn, &self.key, self.last, until, BATCH).await {
                    Ok(page) => {
                        if page.len() < BATCH {
                            self.backlog_until = None;
                        }
                        self.take(page);
                    }
                    Err(error) => return self.failed(&error),
                }
                continue;
            }
            let Some(feed) = self.feed.as_mut() else {
                continue;
            };
            let state = self.state.clone();
            let received = tokio::select! {
                () = state.shutting_down() => return None,
                received = tokio::time::timeout(IDLE, feed.recv()) => received,
            };
            match received {
                Err(_idle) => match self.over().await {
                    Over::No => {}
                    Over::Ended => return None,
                    Over::Settled(run) => return self.last_from_store(&run),
                },
                Ok(Ok(batch)) => self.take(batch.iter().cloned()),
                // Join again, and read what the feed dropped from the stream.
                Ok(Err(Lost::Behind)) => self.feed = None,
                Ok(Err(Lost::Ended)) => {
                    tracing::warn!(run_id = %self.run_id, "the event reader stopped; ending the stream");
                    return None;
                }
            }
        }
    }

    /// Queue the entries past the last one taken.
    fn take(&mut self, entries: impl IntoIterator<Item = Entry>) {
        for entry in entries {
            if entry.id > self.last {
                self.last = entry.id;
                self.pending.push_back(entry);
            }
        }
    }

    fn failed<T>(&self, error: &redis::RedisError) -> Option<T> {
        tracing::warn!(run_id = %self.run_id, %error, "event stream read failed");
        None
    }

    /// Nothing came for a while: is there nothing more to come?
    async fn over(&mut self) -> Over {
        let run = match self.state.store.run(&self.run_id).await {
            Ok(Some(run)) if run.status.is_settled() => run,
            Ok(_) => return Over::No,
            Err(error) => {
                tracing::warn!(run_id = %self.run_id, %error, "cannot read the run");
                return Over::No;
            }
        };
        match stream::newest(&mut self.conn, &self.key).await {
            Ok(None) => Over::Settled(Box::new(run)),
            Ok(Some(newest)) if newest.id != self.last => Over::No,
            Ok(Some(newest)) if newest.is_last() => Over::Ended,
            Ok(Some(_)) => {
                let settled_for = freeway::clock::epoch_ms().saturating_sub(run.updated_ms);
                if settled_for > SETTLE_GRACE_MS {
                    Over::Settled(Box::new(run))
                } else {
                    Over::No
                }
            }
            Err(error) => {
                tracing::warn!(run_id = %self.run_id, %error, "event stream read failed");
                Over::Ended
            }
        }
    }

    /// The settled run's last event, from its record, and then the end.
    fn last_from_store(mut self, run: &RunRecord) -> Option<(Result<SseEvent, Infallible>, Relay)> {
        self.done = true;
        let event = Event::last_of(run)?;
        let sse = SseEvent::default()
            .event(event.kind())
            .data(event.to_json());
        Some((Ok(sse), self))
    }
}

/// What [`Relay::over`] found.
enum Over {
    /// More may come.
    No,
    /// The stream carried the run's last event, or cannot be read.
    Ended,
    /// The run is settled and its stream will not carry its last event.
    Settled(Box<RunRecord>),
}

/// The SSE form of an entry; `None` for an entry no SSE field can carry (a type with a line
/// break, which freeway never writes).
fn to_sse(entry: &Entry) -> Option<SseEvent> {
    let printable = |s: &str| !s.is_empty() && !s.chars().any(char::is_control);
    if !printable(&entry.stored.kind) {
        tracing::warn!(id = %entry.id, "skipping a stream entry that SSE cannot carry");
        return None;
    }
    Some(
        SseEvent::default()
            .id(entry.id.to_string())
            .event(&entry.stored.kind)
            .data(&entry.stored.data),
    )
}
