//! Connecting to the fleet's Redis: one server or a cluster, with timeouts that survive load.
//!
//! redis-rs defaults to a 500 ms response timeout, which kills busy workers (see
//! docs/operations.md); every freeway process connects through here instead. `REDIS_URL` names
//! one server (`redis://`, `rediss://`) or a cluster by its seed nodes
//! (`redis+cluster://h1:p1,h2:p2`, `rediss+cluster://…`); [`RedisConnection`] is either, so the
//! shared parts of the fleet are written once, against redis-rs's `ConnectionLike`. On a
//! cluster, every multi-key script keeps its keys in one slot by a hash tag (docs/operations.md,
//! "Running on a Redis Cluster").

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, FromRedisValue, Pipeline, RedisError, RedisFuture, RedisResult, Value};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant};

#[derive(Debug, thiserror::Error)]
#[error("cannot reach Redis at {url}: {source}")]
pub struct ConnectError {
    /// The URL without its password.
    pub url: String,
    pub source: redis::RedisError,
}

/// Redis timeouts of docs/design.md §4.3: at least 5 s.
pub const REDIS_RESPONSE_TIMEOUT: Duration = Duration::from_secs(10);
pub const REDIS_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Where the fleet's Redis is, as `REDIS_URL` says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RedisTarget {
    /// One server: its URL.
    Server(String),
    /// A cluster: a `redis://` (or `rediss://`) URL for each seed node, the credentials and
    /// database of the cluster URL on each.
    Cluster(Vec<String>),
}

impl RedisTarget {
    /// `redis+cluster://[user:password@]h1:p1,h2:p2[/…]` is a cluster; any other URL one server
    /// (redis-rs checks it when connecting).
    pub fn parse(url: &str) -> Result<RedisTarget, String> {
        let (scheme, rest) = match url.split_once("://") {
            Some(("redis+cluster", rest)) => ("redis", rest),
            Some(("rediss+cluster", rest)) => ("rediss", rest),
            _ => return Ok(RedisTarget::Server(url.to_string())),
        };
        let (auth, hosts) = match rest.rfind('@') {
            Some(at) => (&rest[..=at], &rest[at + 1..]),
            None => ("", rest),
        };
        let (hosts, path) = match hosts.find(['/', '?']) {
            Some(i) => hosts.split_at(i),
            None => (hosts, ""),
        };
        let nodes: Vec<String> = hosts
            .split(',')
            .map(str::trim)
            .filter(|h| !h.is_empty())
            .map(|host| format!("{scheme}://{auth}{host}{path}"))
            .collect();
        if nodes.is_empty() {
            return Err(
                "a cluster URL names at least one node: redis+cluster://host:port,…".into(),
            );
        }
        Ok(RedisTarget::Cluster(nodes))
    }

    /// A URL of one server of it: the server, or the first seed node. Pub/sub is cluster-wide
    /// on a cluster (a message published on any node reaches subscribers on every node), so a
    /// subscriber needs one node only.
    pub fn one_node(&self) -> &str {
        match self {
            RedisTarget::Server(url) => url,
            RedisTarget::Cluster(nodes) => &nodes[0],
        }
    }
}

/// A connection to the fleet's Redis, one server's or a cluster's. Cheap to clone: clones share
/// one multiplexed connection (per node), which reconnects by itself.
#[derive(Clone)]
pub enum RedisConnection {
    Server(ConnectionManager),
    Cluster(Arc<Cluster>),
}

/// A cluster connection that survives a failover. redis-rs's cluster client learns a new slot
/// map only from a `MOVED` answer, and a primary that died answers nothing: the client keeps
/// reconnecting to its address and every command on its slots times out, long after a replica
/// took over. So a command that fails for want of a node (refused, dropped, timed out, no
/// connection, cluster down) has the connection rebuilt from the seed nodes, whose `CLUSTER
/// SLOTS` name the new primary; at most one rebuild at a time and one a [`REBUILD_EVERY`], so a
/// cluster still electing is asked again a moment later.
pub struct Cluster {
    client: redis::cluster::ClusterClient,
    current: RwLock<ClusterConnection>,
    /// When the last rebuild began, and whether one is under way.
    rebuild: Mutex<(Option<Instant>, bool)>,
}

/// The least time between two rebuilds of a cluster connection.
pub const REBUILD_EVERY: Duration = Duration::from_secs(1);

impl Cluster {
    fn connection(&self) -> ClusterConnection {
        self.current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Rebuild the connection in the background after `error`, if it says a node is missing.
    fn heal(self: &Arc<Self>, error: &RedisError) {
        let node_missing = error.is_io_error()
            || error.is_timeout()
            || error.is_connection_dropped()
            || error.is_connection_refusal()
            || matches!(
                error.kind(),
                redis::ErrorKind::ClusterConnectionNotFound
                    | redis::ErrorKind::Server(redis::ServerErrorKind::ClusterDown)
            );
        if !node_missing {
            return;
        }
        {
            let mut rebuild = self.rebuild.lock().unwrap_or_else(PoisonError::into_inner);
            let recent = rebuild.0.is_some_and(|at| at.elapsed() < REBUILD_EVERY);
            if rebuild.1 || recent {
                return;
            }
            *rebuild = (Some(Instant::now()), true);
        }
        let cluster = self.clone();
        tokio::spawn(async move {
            match cluster.client.get_async_connection().await {
                Ok(fresh) => {
                    *cluster
                        .current
                        .write()
                        .unwrap_or_else(PoisonError::into_inner) = fresh;
                    tracing::warn!(
                        "a Redis Cluster node failed: the connection was rebuilt from the seed nodes' slot map"
                    );
                }
                Err(error) => {
                    tracing::warn!(%error, "a Redis Cluster node failed and the seed nodes do not answer yet");
                }
            }
            cluster
                .rebuild
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .1 = false;
        });
    }
}

impl RedisConnection {
    /// Whether it speaks to a cluster.
    pub fn is_cluster(&self) -> bool {
        matches!(self, RedisConnection::Cluster(_))
    }

    /// The values of `keys`, in order (`Nil` where a key holds none): one `MGET` for the keys
    /// of each slot, so that a scope's keys, hash-tagged together, cost one command, on a
    /// server and on a cluster alike.
    pub async fn values_by_slot(&self, keys: &[String]) -> RedisResult<Vec<Value>> {
        let mut slots: Vec<(u16, Vec<usize>)> = Vec::new();
        for (i, key) in keys.iter().enumerate() {
            let of_key = slot(key);
            match slots.iter_mut().find(|(s, _)| *s == of_key) {
                Some((_, members)) => members.push(i),
                None => slots.push((of_key, vec![i])),
            }
        }
        let gets = slots
            .iter()
            .map(|(_, members)| {
                let mut mget = redis::cmd("MGET");
                for &i in members {
                    mget.arg(&keys[i]);
                }
                mget
            })
            .collect();
        let answers: Vec<Vec<Value>> = self.each(gets).await?;
        let mut values = vec![Value::Nil; keys.len()];
        for ((_, members), answer) in slots.iter().zip(answers) {
            if answer.len() != members.len() {
                return Err(redis::RedisError::from((
                    redis::ErrorKind::UnexpectedReturnType,
                    "MGET answered another number of values than it was asked",
                )));
            }
            for (&i, value) in members.iter().zip(answer) {
                values[i] = value;
            }
        }
        Ok(values)
    }

    /// The answers to `commands`, in order, where the commands' keys may lie in different
    /// slots: one pipeline (one round trip) on a server; on a cluster, where a pipeline keeps
    /// to one slot, each command on its own, all at once. The same commands either way.
    pub async fn each<T: FromRedisValue>(&self, commands: Vec<Cmd>) -> RedisResult<Vec<T>> {
        match self {
            RedisConnection::Server(conn) => {
                if commands.is_empty() {
                    return Ok(Vec::new());
                }
                let mut pipe = redis::pipe();
                for cmd in commands {
                    pipe.add_command(cmd);
                }
                pipe.query_async(&mut conn.clone()).await
            }
            RedisConnection::Cluster(_) => {
                let asked = commands.iter().map(|cmd| {
                    let mut conn = self.clone();
                    async move { cmd.query_async::<T>(&mut conn).await }
                });
                futures_util::future::try_join_all(asked).await
            }
        }
    }
}

/// Whether a command failed on a connection that was gone before it could be answered: one that
/// could not be made (Redis was away when the connection manager last tried) or had closed (Redis
/// restarted while it sat idle). The manager starts a new connection as it reports the failure,
/// so one more try goes out on it: the first request after Redis returns is served rather than
/// answered 503.
///
/// A command out when Redis dies meets a closed connection too, and may have run: it runs twice
/// at most, and only when Redis crashed at that moment. Most of what freeway writes is safe to
/// repeat (rests only extend, claims and queue pushes are keyed); a counter or an event may be
/// counted twice.
fn gone_before_answer(error: &redis::RedisError) -> bool {
    error.is_connection_refusal() || error.is_connection_dropped()
}

impl ConnectionLike for RedisConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            RedisConnection::Server(c) => {
                let mut c = c.clone();
                Box::pin(async move {
                    match c.req_packed_command(cmd).await {
                        Err(e) if gone_before_answer(&e) => c.req_packed_command(cmd).await,
                        answer => answer,
                    }
                })
            }
            RedisConnection::Cluster(cluster) => {
                let cluster = cluster.clone();
                Box::pin(async move {
                    let answer = cluster.connection().req_packed_command(cmd).await;
                    if let Err(error) = &answer {
                        cluster.heal(error);
                    }
                    answer
                })
            }
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            RedisConnection::Server(c) => {
                let mut c = c.clone();
                Box::pin(async move {
                    match c.req_packed_commands(cmd, offset, count).await {
                        Err(e) if gone_before_answer(&e) => {
                            c.req_packed_commands(cmd, offset, count).await
                        }
                        answer => answer,
                    }
                })
            }
            RedisConnection::Cluster(cluster) => {
                let cluster = cluster.clone();
                Box::pin(async move {
                    let answer = cluster
                        .connection()
                        .req_packed_commands(cmd, offset, count)
                        .await;
                    if let Err(error) = &answer {
                        cluster.heal(error);
                    }
                    answer
                })
            }
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            RedisConnection::Server(c) => c.get_db(),
            RedisConnection::Cluster(cluster) => cluster.connection().get_db(),
        }
    }
}

/// What decides `key`'s slot on a cluster: its hash tag (the text between the first `{` and the
/// next `}`, when not empty), else the whole key. Keys of one tag share a slot.
pub fn hash_tag(key: &str) -> &str {
    key.find('{')
        .and_then(|open| {
            let rest = &key[open + 1..];
            rest.find('}')
                .filter(|&close| close > 0)
                .map(|close| &rest[..close])
        })
        .unwrap_or(key)
}

/// Which of `shards` an id belongs to: FNV-1a of its bytes, stable across processes and
/// versions, which keys derived from it must be.
pub fn shard_of(id: &str, shards: u32) -> u32 {
    let hash = id.bytes().fold(0x811c_9dc5_u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    });
    hash % shards.max(1)
}

/// The cluster slot of `key` (of its [`hash_tag`]): CRC16-XMODEM modulo 16384, as Redis
/// Cluster computes it.
pub fn slot(key: &str) -> u16 {
    let crc = hash_tag(key).bytes().fold(0u16, |mut crc, byte| {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
        crc
    });
    crc % SLOTS
}

/// The slots of a Redis Cluster.
pub const SLOTS: u16 = 16_384;

/// `command key`, for [`RedisConnection::each`].
pub fn keyed(command: &str, key: &str) -> Cmd {
    let mut cmd = redis::cmd(command);
    cmd.arg(key);
    cmd
}

/// Connect to `url` (one server or a cluster, see [`RedisTarget::parse`]).
pub async fn redis(url: &str) -> Result<RedisConnection, ConnectError> {
    redis_answering_within(url, REDIS_RESPONSE_TIMEOUT).await
}

/// A connection of its own for a blocking read (`XREAD BLOCK`), whose answer may take the whole
/// `block`: a blocked command on a shared connection would hold up every command behind it.
pub async fn blocking(url: &str, block: Duration) -> Result<RedisConnection, ConnectError> {
    redis_answering_within(url, block + REDIS_RESPONSE_TIMEOUT).await
}

async fn redis_answering_within(
    url: &str,
    response_timeout: Duration,
) -> Result<RedisConnection, ConnectError> {
    let err = |source| ConnectError {
        url: redact(url),
        source,
    };
    let target = RedisTarget::parse(url).map_err(|why| {
        err(redis::RedisError::from((
            redis::ErrorKind::InvalidClientConfig,
            "invalid cluster URL",
            why,
        )))
    })?;
    match target {
        RedisTarget::Server(url) => {
            let client = redis::Client::open(url).map_err(err)?;
            let config = ConnectionManagerConfig::new()
                .set_response_timeout(Some(response_timeout))
                .set_connection_timeout(Some(REDIS_CONNECT_TIMEOUT))
                .set_number_of_retries(1);
            let conn = client
                .get_connection_manager_with_config(config)
                .await
                .map_err(err)?;
            Ok(RedisConnection::Server(conn))
        }
        RedisTarget::Cluster(nodes) => {
            let client = redis::cluster::ClusterClientBuilder::new(nodes)
                .response_timeout(response_timeout)
                .connection_timeout(REDIS_CONNECT_TIMEOUT)
                .build()
                .map_err(err)?;
            let conn = client.get_async_connection().await.map_err(err)?;
            Ok(RedisConnection::Cluster(Arc::new(Cluster {
                client,
                current: RwLock::new(conn),
                rebuild: Mutex::new((None, false)),
            })))
        }
    }
}

/// A URL with any password replaced, fit for an error line.
pub fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s + 3 => format!("{}***{}", &url[..s + 3], &url[at..]),
        _ => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::RedisTarget;

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(
            super::redact("redis://:pw@host:1/0"),
            "redis://***@host:1/0"
        );
        assert_eq!(
            super::redact("redis://127.0.0.1:6379"),
            "redis://127.0.0.1:6379"
        );
        assert_eq!(
            super::redact("redis+cluster://u:pw@h1:1,h2:2"),
            "redis+cluster://***@h1:1,h2:2"
        );
    }

    #[test]
    fn slots_are_redis_clusters() {
        // The figures `CLUSTER KEYSLOT` answers.
        assert_eq!(super::slot("foo"), 12182);
        assert_eq!(super::slot("123456789"), 12739);
        assert_eq!(
            super::slot("core:apalis:queues:list"),
            super::slot("{core:apalis:queues:list}x")
        );
        assert_eq!(super::slot("user{1000}.following"), super::slot("1000"));
    }

    #[test]
    fn a_hash_tag_is_the_first_braced_text_that_is_not_empty() {
        use super::hash_tag;
        assert_eq!(hash_tag("ns:{events:3}:run:r1:events"), "events:3");
        assert_eq!(hash_tag("{a}{b}"), "a");
        assert_eq!(
            hash_tag("x{}{b}"),
            "x{}{b}",
            "an empty first tag: the whole key"
        );
        assert_eq!(hash_tag("x{open"), "x{open");
        assert_eq!(hash_tag("plain"), "plain");
    }

    #[test]
    fn a_cluster_url_names_every_seed_node_with_its_credentials() {
        assert_eq!(
            RedisTarget::parse("redis+cluster://u:pw@h1:1,h2:2/").unwrap(),
            RedisTarget::Cluster(vec![
                "redis://u:pw@h1:1/".into(),
                "redis://u:pw@h2:2/".into()
            ])
        );
        assert_eq!(
            RedisTarget::parse("rediss+cluster://h1:1").unwrap(),
            RedisTarget::Cluster(vec!["rediss://h1:1".into()])
        );
        assert_eq!(
            RedisTarget::parse("redis://h:1/2").unwrap(),
            RedisTarget::Server("redis://h:1/2".into())
        );
        assert!(RedisTarget::parse("redis+cluster://").is_err());
        assert!(RedisTarget::parse("redis+cluster://u@,").is_err());
    }
}
