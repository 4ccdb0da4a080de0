//! Reading a run's event stream (`{ns}:{events:<shard>}:run:{run_id}:events`, docs/design.md §2.5) as it grows: what
//! `GET /v1/runs/{id}/events` relays as Server-Sent Events and `producer enqueue --wait` prints.
//!
//! The short reads ([`range`], [`entry_at`], [`newest`]) never block, so they run on the shared
//! connection. Waiting for new entries does: the API waits through the one shared reader of
//! [`crate::hub`], and the CLI, which follows one run, through a [`Reader`] of its own. Either
//! way `XREAD BLOCK` gets a connection of its own: a blocking command on the shared
//! `RedisConnection` would stall every other command queued behind it.

use freeway::connect::{ConnectError, RedisConnection};
use freeway::events::{Event, StoredEvent};
use redis::AsyncCommands;
use redis::aio::ConnectionLike;
use redis::streams::{StreamRangeReply, StreamReadOptions, StreamReadReply};
use std::fmt;
use std::time::Duration;

/// How long one `XREAD` of a [`Reader`] waits for new entries.
pub const BLOCK: Duration = Duration::from_secs(10);
/// Entries read at most per `XREAD` or `XRANGE`.
pub const BATCH: usize = 256;

/// A stream entry's id, `<ms>-<seq>`, ordered as Redis orders them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct StreamId {
    ms: u64,
    seq: u64,
}

impl StreamId {
    /// Before every entry: reading "after" it reads from the beginning.
    pub const ZERO: StreamId = StreamId { ms: 0, seq: 0 };

    pub fn parse(id: &str) -> Option<StreamId> {
        let (ms, seq) = id.split_once('-')?;
        // Digits only: `u64`'s parse would also take a sign.
        let number = |s: &str| {
            (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
                .then(|| s.parse().ok())
                .flatten()
        };
        Some(StreamId {
            ms: number(ms)?,
            seq: number(seq)?,
        })
    }

    /// The smallest id after this one: `XRANGE` bounds are inclusive.
    fn next(self) -> StreamId {
        match self.seq.checked_add(1) {
            Some(seq) => StreamId { ms: self.ms, seq },
            None => StreamId {
                ms: self.ms.saturating_add(1),
                seq: 0,
            },
        }
    }
}

impl fmt::Display for StreamId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.ms, self.seq)
    }
}

/// One entry of a run's stream: its stream id, and what was stored under it (read by the core's
/// events module, which wrote it).
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub id: StreamId,
    pub stored: StoredEvent,
}

impl Entry {
    /// After this entry the run's stream has nothing more to say for this job.
    pub fn is_last(&self) -> bool {
        self.stored.event.as_ref().is_some_and(Event::is_last)
    }
}

/// Redis's entries as ours; Redis only hands out well-formed ids, anything else is skipped.
pub(crate) fn entries(ids: Vec<redis::streams::StreamId>) -> Vec<Entry> {
    ids.into_iter()
        .filter_map(|e| {
            let Some(id) = StreamId::parse(&e.id) else {
                tracing::warn!(id = %e.id, "skipping a stream entry with a malformed id");
                return None;
            };
            Some(Entry {
                id,
                stored: StoredEvent::read(&e),
            })
        })
        .collect()
}

/// A `Last-Event-ID` that is not a Redis stream id (`<ms>-<seq>`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("Last-Event-ID must be a stream id such as 1700000000000-0, got {0:?}")]
pub struct BadEventId(pub String);

/// Check a client-supplied stream id.
pub fn parse_event_id(id: &str) -> Result<StreamId, BadEventId> {
    StreamId::parse(id).ok_or_else(|| BadEventId(id.to_string()))
}

/// Up to `count` entries after `after`, up to and including `until`.
pub async fn range<C: ConnectionLike + Send + Sync>(
    conn: &mut C,
    key: &str,
    after: StreamId,
    until: StreamId,
    count: usize,
) -> Result<Vec<Entry>, redis::RedisError> {
    let reply: StreamRangeReply = conn
        .xrange_count(key, after.next().to_string(), until.to_string(), count)
        .await?;
    Ok(entries(reply.ids))
}

/// The entry with this id, if the stream holds it.
pub async fn entry_at<C: ConnectionLike + Send + Sync>(
    conn: &mut C,
    key: &str,
    id: StreamId,
) -> Result<Option<Entry>, redis::RedisError> {
    let reply: StreamRangeReply = conn
        .xrange_count(key, id.to_string(), id.to_string(), 1)
        .await?;
    Ok(entries(reply.ids).pop())
}

/// The stream's newest entry, `None` when the stream does not exist (it expires a day after the
/// run ends).
pub async fn newest<C: ConnectionLike + Send + Sync>(
    conn: &mut C,
    key: &str,
) -> Result<Option<Entry>, redis::RedisError> {
    let reply: StreamRangeReply = conn.xrevrange_count(key, "+", "-", 1).await?;
    Ok(entries(reply.ids).pop())
}

/// The stream's newest `count` entries, oldest first.
pub async fn latest<C: ConnectionLike + Send + Sync>(
    conn: &mut C,
    key: &str,
    count: usize,
) -> Result<Vec<Entry>, redis::RedisError> {
    let reply: StreamRangeReply = conn.xrevrange_count(key, "+", "-", count).await?;
    let mut newest_first = entries(reply.ids);
    newest_first.reverse();
    Ok(newest_first)
}

/// Follows one run's stream from its beginning, on a connection of its own.
pub struct Reader {
    conn: RedisConnection,
    key: String,
    /// The id of the last entry read.
    last_id: StreamId,
}

impl Reader {
    /// A reader of the run's stream on the Redis at `url` (one server or a cluster).
    pub async fn open(url: &str, ns: &str, run_id: &str) -> Result<Reader, ConnectError> {
        Ok(Reader {
            conn: freeway::connect::blocking(url, BLOCK).await?,
            key: freeway::events::stream_key(ns, run_id),
            last_id: StreamId::ZERO,
        })
    }

    /// The entries after the last one read, waiting up to [`BLOCK`] for some; empty when none
    /// came.
    pub async fn next_batch(&mut self) -> Result<Vec<Entry>, redis::RedisError> {
        let options = StreamReadOptions::default()
            .block(BLOCK.as_millis() as usize)
            .count(BATCH);
        let reply: Option<StreamReadReply> = self
            .conn
            .xread_options(&[&self.key], &[self.last_id.to_string()], &options)
            .await?;
        let entries = entries(
            reply
                .into_iter()
                .flat_map(|r| r.keys)
                .flat_map(|k| k.ids)
                .collect(),
        );
        if let Some(last) = entries.last() {
            self.last_id = last.id;
        }
        Ok(entries)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_stream_ids_are_accepted_as_positions() {
        assert_eq!(
            parse_event_id("1700000000000-3").map(|id| id.to_string()),
            Ok("1700000000000-3".to_string())
        );
        for bad in [
            "",
            "0",
            "x-1",
            "1-",
            "-1",
            "1-2-3",
            "$",
            "1700000000000-0 ",
            "+1-0",
            "18446744073709551616-0",
        ] {
            assert!(parse_event_id(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn ids_order_as_redis_orders_them_and_the_next_one_follows() {
        let id = |s: &str| StreamId::parse(s).expect("an id");
        assert!(id("9-5") < id("10-0"));
        assert!(id("10-0") < id("10-1"));
        assert_eq!(id("10-1").next(), id("10-2"));
        assert_eq!(id("10-18446744073709551615").next(), id("11-0"));
        assert_eq!(StreamId::ZERO.next(), id("0-1"));
    }
}
