//! Reading a run's event stream (`{ns}:run:{run_id}:events`, SPEC §2.5) as it grows: what
//! `GET /v1/runs/{id}/events` relays as Server-Sent Events and `producer enqueue --wait` prints.
//!
//! Each reader blocks in `XREAD BLOCK` on a connection of its own: a blocking command on the
//! shared `ConnectionManager` would stall every other command queued behind it.

use redis::AsyncCommands;
use redis::aio::MultiplexedConnection;
use redis::streams::{StreamReadOptions, StreamReadReply};
use std::time::Duration;

/// How long one `XREAD` waits for new entries.
pub const BLOCK: Duration = Duration::from_secs(10);
/// Entries read at most per `XREAD`.
const BATCH: usize = 256;

/// One entry of a run's stream: the stream id, the event type and the event JSON.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub id: String,
    pub kind: String,
    pub data: String,
}

impl Entry {
    /// After these a run's stream has nothing more to say for this job: the same list as
    /// `freeway::events::Event::is_last`, by type name.
    pub fn is_last(&self) -> bool {
        matches!(
            self.kind.as_str(),
            "finished" | "refused" | "awaiting_approval"
        )
    }
}

fn entry(e: redis::streams::StreamId) -> Entry {
    Entry {
        kind: e.get("type").unwrap_or_default(),
        data: e.get("data").unwrap_or_default(),
        id: e.id,
    }
}

/// A `Last-Event-ID` that is not a Redis stream id (`<ms>-<seq>`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("Last-Event-ID must be a stream id such as 1700000000000-0, got {0:?}")]
pub struct BadEventId(pub String);

/// Check a client-supplied stream id.
pub fn parse_event_id(id: &str) -> Result<String, BadEventId> {
    let ok = id
        .split_once('-')
        .is_some_and(|(ms, seq)| is_number(ms) && is_number(seq));
    if ok {
        Ok(id.to_string())
    } else {
        Err(BadEventId(id.to_string()))
    }
}

fn is_number(s: &str) -> bool {
    (1..=20).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_digit())
}

/// Follows one run's stream from a position.
pub struct Reader {
    conn: MultiplexedConnection,
    key: String,
    /// The id of the last entry read (`0` before the first).
    last_id: String,
}

impl Reader {
    /// Open a dedicated connection and start after `after` (`None`: from the beginning).
    pub async fn open(
        client: &redis::Client,
        ns: &str,
        run_id: &str,
        after: Option<String>,
    ) -> Result<Reader, redis::RedisError> {
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(freeway::connect::REDIS_CONNECT_TIMEOUT))
            .set_response_timeout(Some(BLOCK + freeway::connect::REDIS_RESPONSE_TIMEOUT));
        let conn = client
            .get_multiplexed_async_connection_with_config(&config)
            .await?;
        Ok(Reader {
            conn,
            key: freeway::events::stream_key(ns, run_id),
            last_id: after.unwrap_or_else(|| "0".to_string()),
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
            .xread_options(&[&self.key], &[&self.last_id], &options)
            .await?;
        let entries: Vec<Entry> = reply
            .into_iter()
            .flat_map(|r| r.keys)
            .flat_map(|k| k.ids)
            .map(entry)
            .collect();
        if let Some(last) = entries.last() {
            self.last_id = last.id.clone();
        }
        Ok(entries)
    }

    /// The id of the last entry read (`0` before the first).
    pub fn position(&self) -> &str {
        &self.last_id
    }

    /// The entry at the current position (the one last read, or the resume point), if any.
    pub async fn current(&mut self) -> Result<Option<Entry>, redis::RedisError> {
        let reply: redis::streams::StreamRangeReply = self
            .conn
            .xrange_count(&self.key, &self.last_id, &self.last_id, 1)
            .await?;
        Ok(reply.ids.into_iter().next().map(entry))
    }

    /// The stream's newest entry, `None` when the stream does not exist (it expires a day after
    /// the run ends).
    pub async fn newest(&mut self) -> Result<Option<Entry>, redis::RedisError> {
        let reply: redis::streams::StreamRangeReply =
            self.conn.xrevrange_count(&self.key, "+", "-", 1).await?;
        Ok(reply.ids.into_iter().next().map(entry))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_stream_ids_are_accepted_as_positions() {
        assert_eq!(
            parse_event_id("1700000000000-3").as_deref(),
            Ok("1700000000000-3")
        );
        for bad in ["", "0", "x-1", "1-", "-1", "1-2-3", "$", "1700000000000-0 "] {
            assert!(parse_event_id(bad).is_err(), "{bad:?}");
        }
    }
}
