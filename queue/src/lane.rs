//! The run queue's lanes: `FREEWAY_QUEUES` apalis queues that runs are spread over by id, and
//! the connection apalis speaks through on each.
//!
//! One apalis queue is one set of keys, and on a cluster one slot: every push, fetch and
//! acknowledgement of the fleet lands on one primary. Lanes give each queue a hash tag of its
//! own, chosen to fall in its own share of the slot space, so that a cluster's primaries share
//! the queue's work. A run's lane is fixed by its id ([`lane_of`]), so a snooze, a wake-up or a
//! cancellation finds it without asking every lane.
//!
//! apalis-redis 1.0.0's worker registration script also writes a fixed key it does not declare
//! ([`APALIS_REGISTRY`]), which a cluster lets a script touch only on the node that holds the
//! script's declared keys. [`ApalisConnection`] runs that one script as two commands on a
//! cluster, each on its own slot: the registration of the worker in its lane, and the lane's
//! entry in the registry.

use freeway::connect::{RedisConnection, SLOTS, shard_of, slot};
use redis::aio::ConnectionLike;
use redis::{Arg, Cmd, Pipeline, RedisFuture, Value};
use std::sync::Arc;

/// The key apalis-redis 1.0.0's worker registration writes, whatever the queue: a fixed key its
/// script does not declare.
pub const APALIS_REGISTRY: &str = "core:apalis:queues:list";

/// The most lanes `FREEWAY_QUEUES` may ask for: each is polled by every replica.
pub const MAX_LANES: usize = freeway::config::MAX_QUEUES;

/// The lane of run `run_id` among `lanes`.
pub fn lane_of(run_id: &str, lanes: usize) -> usize {
    shard_of(run_id, lanes.clamp(1, MAX_LANES) as u32) as usize
}

/// The apalis queue names (their keys' prefix) of a namespace's `lanes` lanes.
///
/// Lane 0 keeps the name of the one queue freeway had before lanes, so that going from one lane
/// to more strands nothing. On a cluster it carries [`APALIS_REGISTRY`]'s hash tag (apalis's
/// scripts then find every key they touch, the registry's included, in one slot), and lane `i`
/// the tag of its own in `{ns}:runs:{tag}`, the first of `{ns}:runs:i`, `{ns}:runs:i~1`, … whose
/// slot lies in the
/// `i`-th share of the slots after lane 0's: on a cluster whose primaries hold equal runs of
/// slots (as `redis-cli --cluster create` makes them), lanes fall on different primaries.
pub fn lane_names(ns: &str, lanes: usize, cluster: bool) -> Vec<String> {
    let lanes = lanes.clamp(1, MAX_LANES);
    let first = if cluster {
        format!("{{{APALIS_REGISTRY}}}{ns}:runs")
    } else {
        format!("{ns}:runs")
    };
    let share = |key: &str| usize::from(slot(key)) * lanes / usize::from(SLOTS);
    let first_share = share(&first);
    let mut names = vec![first];
    for lane in 1..lanes {
        let plain = format!("{ns}:runs:{lane}");
        if !cluster {
            names.push(plain);
            continue;
        }
        let wanted = (first_share + lane) % lanes;
        // One candidate in `lanes` falls in the wanted share; a thousand tries that all miss
        // is odds of (1 - 1/64)^1000 at worst, and would still leave a usable lane.
        let tag = (0..1000)
            .map(|k| match k {
                0 => plain.clone(),
                k => format!("{plain}~{k}"),
            })
            .find(|tag| share(tag) == wanted)
            .unwrap_or(plain);
        names.push(format!("{ns}:runs:{{{tag}}}"));
    }
    names
}

/// freeway's Redis connection as one lane's apalis storage uses it: every command goes as it
/// is, except apalis's worker registration on a cluster (see the module's doc).
#[derive(Clone)]
pub struct ApalisConnection {
    conn: RedisConnection,
    /// The lane's workers set: the registration's first key, by which it is recognised.
    workers_set: Arc<str>,
}

impl ApalisConnection {
    /// `conn` as the lane whose workers set is `workers_set` uses it.
    pub fn new(conn: RedisConnection, workers_set: &str) -> ApalisConnection {
        ApalisConnection {
            conn,
            workers_set: workers_set.into(),
        }
    }

    /// The arguments of apalis-redis 1.0.0's `register_worker.lua` call: `EVALSHA sha 2
    /// workers_set metadata_key now worker_name threshold "RedisStorage" service`.
    fn registration<'a>(&self, cmd: &'a Cmd) -> Option<Vec<&'a [u8]>> {
        if !self.conn.is_cluster() {
            return None;
        }
        let args: Vec<&[u8]> = cmd
            .args_iter()
            .map(|arg| match arg {
                Arg::Simple(bytes) => bytes,
                _ => &[],
            })
            .collect();
        let is_it = args.len() == 10
            && args[0].eq_ignore_ascii_case(b"EVALSHA")
            && args[2] == b"2"
            && args[3] == self.workers_set.as_bytes()
            && args[8] == b"RedisStorage";
        is_it.then_some(args)
    }
}

/// Registration without the registry: the lane's own keys, in one slot.
static REGISTER: std::sync::LazyLock<redis::Script> = std::sync::LazyLock::new(|| {
    redis::Script::new(
        r#"
        local last_seen = redis.call("zscore", KEYS[1], ARGV[2])
        if last_seen and tonumber(ARGV[1]) - tonumber(last_seen) < tonumber(ARGV[3]) then
            error("worker is still active within threshold")
        end
        redis.call("zadd", KEYS[1], ARGV[1], ARGV[2])
        redis.call("hmset", KEYS[2], "backend_name", ARGV[4], "service", ARGV[5])
        return true
        "#,
    )
});

impl ConnectionLike for ApalisConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        let Some(args) = self.registration(cmd) else {
            return self.conn.req_packed_command(cmd);
        };
        let mut conn = self.conn.clone();
        Box::pin(async move {
            let mut script = REGISTER.key(args[3]);
            script.key(args[4]);
            for arg in &args[5..] {
                script.arg(*arg);
            }
            let registered: Value = script.invoke_async(&mut conn).await?;
            redis::cmd("ZADD")
                .arg(APALIS_REGISTRY)
                .arg("GT")
                .arg(args[5])
                .arg(args[3])
                .query_async::<()>(&mut conn)
                .await?;
            Ok(registered)
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        self.conn.req_packed_commands(cmd, offset, count)
    }

    fn get_db(&self) -> i64 {
        self.conn.get_db()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lane_zero_keeps_the_one_queue_name() {
        assert_eq!(lane_names("fw", 1, false), vec!["fw:runs"]);
        assert_eq!(
            lane_names("fw", 1, true),
            vec![format!("{{{APALIS_REGISTRY}}}fw:runs")]
        );
        assert_eq!(
            lane_names("fw", 3, false),
            vec!["fw:runs", "fw:runs:1", "fw:runs:2"]
        );
    }

    #[test]
    fn a_clusters_lanes_fall_in_shares_of_their_own() {
        for lanes in [2, 3, 6, MAX_LANES] {
            let names = lane_names("fw", lanes, true);
            let mut shares: Vec<usize> = names
                .iter()
                .map(|n| usize::from(slot(n)) * lanes / usize::from(SLOTS))
                .collect();
            shares.sort_unstable();
            shares.dedup();
            assert_eq!(shares.len(), lanes, "{names:?}");
            // Every lane's keys share its tag: `{name}:active` and `{name}:workers` one slot.
            for name in &names {
                assert_eq!(slot(&format!("{name}:active")), slot(&format!("{name}:x")));
            }
        }
    }

    #[test]
    fn a_run_keeps_its_lane_and_runs_spread_over_all() {
        assert_eq!(lane_of("r1", 1), 0);
        assert_eq!(lane_of("r1", 3), lane_of("r1", 3));
        let mut seen = [0usize; 3];
        for i in 0..3000 {
            seen[lane_of(&format!("run-{i}"), 3)] += 1;
        }
        assert!(seen.iter().all(|&n| n > 800), "{seen:?}");
    }
}
