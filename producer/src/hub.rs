//! One reader of the runs' event streams for the whole process, shared by every open
//! `GET /v1/runs/{id}/events` response.
//!
//! A reader per response would hold a Redis connection per response (blocked in `XREAD`), so
//! a few thousand browsers would use up the process's file descriptors and Redis's client limit.
//! Instead one task, on one connection of its own, runs `XREAD BLOCK` over the streams of every
//! run someone follows and fans each run's new entries out to that run's subscribers through a
//! [`broadcast`] channel (a *feed*): many clients on one run share one feed. Past
//! [`KEYS_PER_READ`] followed runs a second reader with a second connection takes the new ones,
//! and so on, so the connections grow with the cap on streams, not with the streams.
//!
//! A feed only reads forward from where it stands. A subscriber gets, with its subscription,
//! the feed's position when it joined ([`Subscription::from`]): the entries after it come
//! through the feed, the ones up to it (what the client has not seen yet) it reads itself with
//! the non-blocking [`stream::range`]. A subscriber that falls so far behind that its channel
//! drops entries ([`Lost::Behind`]) joins again the same way.
//!
//! A reader blocked in `XREAD` does not see a run added after the read began, so adding one
//! wakes it with `CLIENT UNBLOCK`; its short `BLOCK` bounds the wait in the rare case where the
//! wake-up arrives before the read.
//!
//! On a Redis Cluster one `XREAD` names streams of one slot only, and a blocked read holds its
//! node's connection. There a reader does not block: every 100 ms it reads its feeds' streams
//! without waiting, one `XREAD` per slot, all at once on the shared connection; the runs'
//! streams are spread over sixteen hash tags ([`freeway::events::stream_key`]), so that is at
//! most sixteen reads however many runs it follows. A new feed wakes it at once.

use crate::stream::{self, BATCH, Entry, StreamId};
use freeway::connect::RedisConnection;
use redis::AsyncCommands;
use redis::streams::{StreamReadOptions, StreamReadReply};
use std::collections::HashMap;
use std::collections::hash_map::Entry as Slot;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;
use tokio::sync::{Notify, broadcast};

/// Stream keys one `XREAD` names at most.
pub const KEYS_PER_READ: usize = 1_000;
/// How long a reader's `XREAD` waits; see the module's last paragraphs.
const BLOCK: Duration = Duration::from_secs(1);
/// How often a reader on a cluster reads its feeds' streams while nothing new comes.
const POLL: Duration = Duration::from_millis(100);
/// A reader with no run to follow keeps its connection this long for the next one, then ends.
const LINGER: Duration = Duration::from_secs(30);
/// Batches of entries a feed holds for its slowest subscriber.
const BUFFERED: usize = 64;

/// New entries of one run's stream, oldest first.
pub type Batch = Arc<[Entry]>;

/// The process's readers and their feeds.
pub struct Hub {
    inner: Arc<Inner>,
}

struct Inner {
    /// `REDIS_URL`, for the readers' connections of their own.
    url: String,
    /// The shared connection: where a feed starts, and waking a reader.
    conn: RedisConnection,
    state: Mutex<State>,
}

struct State {
    /// By stream key.
    feeds: HashMap<String, Feed>,
    readers: Vec<Reader>,
    /// Tells a feed from a later one of the same key.
    generation: u64,
}

struct Feed {
    reader: usize,
    generation: u64,
    /// The last entry read into the feed.
    position: StreamId,
    subscribers: usize,
    tx: broadcast::Sender<Batch>,
}

#[derive(Default)]
struct Reader {
    feeds: usize,
    running: bool,
    /// The Redis client id of the reader's connection while it has one, for `CLIENT UNBLOCK`.
    client_id: Option<i64>,
    wake: Arc<Notify>,
}

/// Why a subscription delivers no more.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lost {
    /// The subscriber fell behind what the feed holds: join again and read what was missed.
    Behind,
    /// The feed ended: its reader failed to read Redis.
    Ended,
}

impl Hub {
    /// Readers for up to `streams` open streams; none runs (or connects) before a first
    /// subscription.
    pub fn new(url: &str, conn: RedisConnection, streams: usize) -> Hub {
        let readers = streams.div_ceil(KEYS_PER_READ).max(1);
        Hub {
            inner: Arc::new(Inner {
                url: url.to_string(),
                conn,
                state: Mutex::new(State {
                    feeds: HashMap::new(),
                    readers: (0..readers).map(|_| Reader::default()).collect(),
                    generation: 0,
                }),
            }),
        }
    }

    /// Subscribe to the stream `key`: everything added after [`Subscription::from`] comes
    /// through the subscription.
    pub async fn join(&self, key: &str) -> Result<Subscription, redis::RedisError> {
        // Where a new feed starts: whatever is added later is past it, and the feed reads it.
        let end = stream::newest(&mut self.inner.conn.clone(), key)
            .await?
            .map_or(StreamId::ZERO, |e| e.id);
        let (subscription, woken) = {
            let mut state = self.inner.lock();
            let State {
                feeds,
                readers,
                generation,
            } = &mut *state;
            let (feed, created) = match feeds.entry(key.to_string()) {
                Slot::Occupied(slot) => (slot.into_mut(), false),
                Slot::Vacant(slot) => {
                    let reader = reader_for(readers);
                    readers[reader].feeds += 1;
                    *generation += 1;
                    let feed = Feed {
                        reader,
                        generation: *generation,
                        position: end,
                        subscribers: 0,
                        tx: broadcast::channel(BUFFERED).0,
                    };
                    (slot.insert(feed), true)
                }
            };
            feed.subscribers += 1;
            let subscription = Subscription {
                hub: self.inner.clone(),
                key: key.to_string(),
                generation: feed.generation,
                from: feed.position,
                rx: feed.tx.subscribe(),
            };
            (subscription, created.then_some(feed.reader))
        };
        if let Some(reader) = woken {
            self.wake(reader).await;
        }
        Ok(subscription)
    }

    /// Make the reader take up its new feed: start it, or interrupt its `XREAD`.
    async fn wake(&self, reader: usize) {
        let blocked = {
            let mut state = self.inner.lock();
            let r = &mut state.readers[reader];
            r.wake.notify_one();
            if r.running {
                r.client_id
            } else {
                r.running = true;
                tokio::spawn(read(self.inner.clone(), reader));
                None
            }
        };
        if let Some(id) = blocked {
            let woke: Result<i64, _> = redis::cmd("CLIENT")
                .arg("UNBLOCK")
                .arg(id)
                .query_async(&mut self.inner.conn.clone())
                .await;
            if let Err(error) = woke {
                tracing::debug!(%error, "cannot wake the event reader; its next read has the run");
            }
        }
    }
}

/// The first reader with room for one more feed, so that a second connection opens only past
/// [`KEYS_PER_READ`] feeds; were all full (more feeds than streams allowed), the least busy.
fn reader_for(readers: &[Reader]) -> usize {
    readers
        .iter()
        .position(|r| r.feeds < KEYS_PER_READ)
        .or_else(|| (0..readers.len()).min_by_key(|&r| readers[r].feeds))
        .unwrap_or(0)
}

/// The reader's feeds, each key with its position, and its wake-up, once it has some; `None`
/// once it retired, having had nothing to follow for [`LINGER`].
async fn next_feeds(
    inner: &Inner,
    reader: usize,
) -> Option<(Vec<(String, StreamId)>, Arc<Notify>)> {
    loop {
        let (keys, wake) = inner.followed(reader);
        if !keys.is_empty() {
            return Some((keys, wake));
        }
        let idle = tokio::time::timeout(LINGER, wake.notified()).await.is_err();
        if idle && inner.retire(reader) {
            return None;
        }
    }
}

/// One reader's loop: read its feeds' streams and fan out what comes, until it has had nothing
/// to follow for [`LINGER`].
async fn read(inner: Arc<Inner>, reader: usize) {
    if inner.conn.is_cluster() {
        return poll(inner, reader).await;
    }
    let mut conn: Option<RedisConnection> = None;
    loop {
        let Some((keys, _)) = next_feeds(&inner, reader).await else {
            return;
        };
        let Some(c) = conn.as_mut() else {
            match connect(&inner, reader).await {
                Ok(c) => conn = Some(c),
                Err(error) => {
                    tracing::warn!(%error, "the event reader cannot connect to Redis");
                    inner.fail(reader);
                }
            }
            // Take the feeds anew: some may have come while connecting, with no one to wake.
            continue;
        };
        let options = StreamReadOptions::default()
            .block(BLOCK.as_millis() as usize)
            .count(BATCH);
        let (names, ids): (Vec<&str>, Vec<String>) = keys
            .iter()
            .map(|(key, position)| (key.as_str(), position.to_string()))
            .unzip();
        let reply: Result<Option<StreamReadReply>, _> =
            c.xread_options(&names, &ids, &options).await;
        match reply {
            Ok(reply) => inner.deliver(reply.map(|r| r.keys).unwrap_or_default()),
            Err(error) => {
                tracing::warn!(%error, "the event reader failed to read Redis");
                conn = None;
                inner.fail(reader);
            }
        }
    }
}

/// [`read`] on a cluster: every [`POLL`], or at once when woken, one `XREAD` without waiting
/// per slot of its feeds' streams.
async fn poll(inner: Arc<Inner>, reader: usize) {
    loop {
        let Some((keys, wake)) = next_feeds(&inner, reader).await else {
            return;
        };
        let mut by_slot: HashMap<String, (Vec<String>, Vec<String>)> = HashMap::new();
        for (key, position) in keys {
            let slot = by_slot
                .entry(freeway::connect::hash_tag(&key).to_string())
                .or_default();
            slot.0.push(key);
            slot.1.push(position.to_string());
        }
        let reads = by_slot.values().map(|(names, ids)| {
            let mut conn = inner.conn.clone();
            let options = StreamReadOptions::default().count(BATCH);
            async move {
                conn.xread_options::<_, _, Option<StreamReadReply>>(names, ids, &options)
                    .await
            }
        });
        match futures_util::future::try_join_all(reads).await {
            Ok(replies) => {
                let read: Vec<_> = replies.into_iter().flatten().flat_map(|r| r.keys).collect();
                let quiet = read.is_empty();
                inner.deliver(read);
                if quiet {
                    let _ = tokio::time::timeout(POLL, wake.notified()).await;
                }
            }
            Err(error) => {
                tracing::warn!(%error, "the event reader failed to read Redis");
                inner.fail(reader);
            }
        }
    }
}

/// A reader's connection, its client id recorded for waking it.
async fn connect(
    inner: &Inner,
    reader: usize,
) -> Result<RedisConnection, freeway::connect::ConnectError> {
    let mut conn = freeway::connect::blocking(&inner.url, BLOCK).await?;
    let id: i64 = redis::cmd("CLIENT")
        .arg("ID")
        .query_async(&mut conn)
        .await
        .map_err(|source| freeway::connect::ConnectError {
            url: freeway::connect::redact(&inner.url),
            source,
        })?;
    inner.lock().readers[reader].client_id = Some(id);
    Ok(conn)
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        // Nothing panics while holding the lock; were it poisoned, the map is still whole.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The reader's feeds, each key with its position, and its wake-up.
    fn followed(&self, reader: usize) -> (Vec<(String, StreamId)>, Arc<Notify>) {
        let state = self.lock();
        let keys = state
            .feeds
            .iter()
            .filter(|(_, f)| f.reader == reader)
            .map(|(key, f)| (key.clone(), f.position))
            .collect();
        (keys, state.readers[reader].wake.clone())
    }

    /// Fan out what a read brought: to each feed the entries past its position.
    fn deliver(&self, streams: Vec<redis::streams::StreamKey>) {
        let mut state = self.lock();
        for read in streams {
            let Some(feed) = state.feeds.get_mut(&read.key) else {
                continue;
            };
            let fresh: Vec<Entry> = stream::entries(read.ids)
                .into_iter()
                .filter(|e| e.id > feed.position)
                .collect();
            if let Some(last) = fresh.last() {
                feed.position = last.id;
                // Every feed has a subscriber; one leaving at this moment misses nothing.
                let _ = feed.tx.send(fresh.into());
            }
        }
    }

    /// End the reader's feeds (their subscribers see [`Lost::Ended`]) after a Redis failure.
    fn fail(&self, reader: usize) {
        let mut state = self.lock();
        state.feeds.retain(|_, f| f.reader != reader);
        let r = &mut state.readers[reader];
        r.feeds = 0;
        r.client_id = None;
    }

    /// Stop the reader if it still has nothing to follow; `false` if a feed came meanwhile.
    fn retire(&self, reader: usize) -> bool {
        let mut state = self.lock();
        let r = &mut state.readers[reader];
        if r.feeds > 0 {
            return false;
        }
        r.running = false;
        r.client_id = None;
        true
    }
}

/// One subscriber of a run's feed; leaving (drop) ends the feed with its last subscriber.
pub struct Subscription {
    hub: Arc<Inner>,
    key: String,
    generation: u64,
    from: StreamId,
    rx: broadcast::Receiver<Batch>,
}

impl Subscription {
    /// The feed's position when this subscription joined: it delivers the entries after it,
    /// and the entries up to it are the subscriber's to read from the stream.
    pub fn from(&self) -> StreamId {
        self.from
    }

    /// The next batch of new entries.
    pub async fn recv(&mut self) -> Result<Batch, Lost> {
        self.rx.recv().await.map_err(|e| match e {
            broadcast::error::RecvError::Lagged(_) => Lost::Behind,
            broadcast::error::RecvError::Closed => Lost::Ended,
        })
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let mut state = self.hub.lock();
        let Some(feed) = state.feeds.get_mut(&self.key) else {
            return;
        };
        // A feed that failed and was followed anew is not this subscription's.
        if feed.generation != self.generation {
            return;
        }
        feed.subscribers -= 1;
        if feed.subscribers == 0 {
            let reader = feed.reader;
            state.feeds.remove(&self.key);
            state.readers[reader].feeds -= 1;
        }
    }
}
