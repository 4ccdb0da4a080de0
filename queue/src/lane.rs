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
//!
//! apalis-redis asks every fetch for its configured batch, whatever the worker can start.
//! [`ApalisConnection`] sizes each fetch of a worker's lane to the replica's free slots instead
//! ([`FetchSize`], within the batch apalis asks for): a replica whose runs end fetches as many as
//! ended, plus one small batch to hand out while the next fetch travels, so its slots stay busy
//! while a backlog waits, and it never holds more than its free slots and that batch
//! (docs/design.md §4.3).

use freeway::connect::{RedisConnection, SLOTS, shard_of, slot};
use redis::aio::ConnectionLike;
use redis::{Arg, Cmd, Pipeline, RedisFuture, Value};
use std::sync::Arc;
use tokio::sync::Semaphore;

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

/// How many jobs a lane's fetch takes: the replica's free slots, shared among its lanes, and one
/// small batch ahead of them.
#[derive(Clone)]
pub struct FetchSize {
    /// The replica's slots, which its workers' concurrency limit hands out.
    pub slots: Arc<Semaphore>,
    /// The lanes the replica's workers fetch from, each on its own.
    pub lanes: usize,
    /// Jobs taken beyond the free slots, over all lanes.
    pub ahead: usize,
}

impl FetchSize {
    /// The jobs to take now, at most `asked` (apalis's batch).
    fn now(&self, asked: usize) -> usize {
        fetch_count(
            self.slots.available_permits(),
            self.lanes,
            self.ahead,
            asked,
        )
    }
}

/// A lane's fetch when `free` slots are free. apalis fetches once the worker holds the permit of
/// the slot the first job takes, so that one is free too.
fn fetch_count(free: usize, lanes: usize, ahead: usize, asked: usize) -> usize {
    let lanes = lanes.max(1);
    ((free + 1).div_ceil(lanes) + ahead.div_ceil(lanes)).min(asked)
}

/// A command's arguments as the bytes sent (none of apalis's commands holds a cursor).
fn simple_args(cmd: &Cmd) -> Vec<&[u8]> {
    cmd.args_iter()
        .map(|arg| match arg {
            Arg::Simple(bytes) => bytes,
            _ => &[],
        })
        .collect()
}

/// `cmd` with its batch resized by `fetch`, if it is a fetch of the lane whose workers set is
/// `workers_set`: apalis-redis 1.0.0's `fetch_next.lua` call is `EVALSHA sha 7 workers_set
/// active inflight data signal meta scheduled now batch worker_name`.
fn resize_fetch(cmd: &Cmd, workers_set: &str, fetch: &FetchSize) -> Option<Cmd> {
    let args = simple_args(cmd);
    let is_it = args.len() == 13
        && args[0].eq_ignore_ascii_case(b"EVALSHA")
        && args[2] == b"7"
        && args[3] == workers_set.as_bytes();
    if !is_it {
        return None;
    }
    let asked: usize = std::str::from_utf8(args[11]).ok()?.parse().ok()?;
    let mut resized = redis::cmd("EVALSHA");
    for (i, arg) in args.iter().enumerate().skip(1) {
        match i {
            11 => resized.arg(fetch.now(asked)),
            _ => resized.arg(*arg),
        };
    }
    Some(resized)
}

/// freeway's Redis connection as one lane's apalis storage uses it: every command goes as it
/// is, except apalis's worker registration on a cluster, and its fetches where the worker's
/// slots are known (see the module's doc).
#[derive(Clone)]
pub struct ApalisConnection {
    conn: RedisConnection,
    /// The lane's workers set: the first key of the registration and of a fetch, by which they
    /// are recognised.
    workers_set: Arc<str>,
    fetch: Option<FetchSize>,
}

impl ApalisConnection {
    /// `conn` as the lane whose workers set is `workers_set` uses it.
    pub fn new(conn: RedisConnection, workers_set: &str) -> ApalisConnection {
        ApalisConnection {
            conn,
            workers_set: workers_set.into(),
            fetch: None,
        }
    }

    /// The same, each fetch sized by `fetch`.
    pub fn fetching(mut self, fetch: FetchSize) -> ApalisConnection {
        self.fetch = Some(fetch);
        self
    }

    /// A fetch's call resized to the slots free now, if `cmd` is one of this lane's fetches.
    fn resized_fetch(&self, cmd: &Cmd) -> Option<Cmd> {
        resize_fetch(cmd, &self.workers_set, self.fetch.as_ref()?)
    }

    /// The arguments of apalis-redis 1.0.0's `register_worker.lua` call: `EVALSHA sha 2
    /// workers_set metadata_key now worker_name threshold "RedisStorage" service`.
    fn registration<'a>(&self, cmd: &'a Cmd) -> Option<Vec<&'a [u8]>> {
        if !self.conn.is_cluster() {
            return None;
        }
        let args = simple_args(cmd);
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
        if let Some(resized) = self.resized_fetch(cmd) {
            let mut conn = self.conn.clone();
            return Box::pin(async move { conn.req_packed_command(&resized).await });
        }
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
    fn a_fetch_takes_the_free_slots_and_one_small_batch() {
        // All 64 slots free but the one the fetching worker holds: 63 + 1 + 16.
        assert_eq!(fetch_count(63, 1, 16, 80), 80);
        // Every slot busy but the held one: that one and the batch ahead.
        assert_eq!(fetch_count(0, 1, 16, 80), 17);
        // Never more than apalis asked for.
        assert_eq!(fetch_count(1000, 1, 16, 80), 80);
        // Lanes share the free slots and the batch.
        assert_eq!(fetch_count(9, 2, 16, 80), 5 + 8);
        assert_eq!(fetch_count(0, 0, 16, 80), 17);
    }

    #[test]
    fn only_a_fetch_of_the_lanes_own_workers_is_resized() {
        let fetch = FetchSize {
            slots: Arc::new(Semaphore::new(3)),
            lanes: 1,
            ahead: 16,
        };
        let call = |workers: &str, keys: &str| {
            let mut cmd = redis::cmd("EVALSHA");
            cmd.arg("sha").arg(keys).arg(workers);
            for key in ["active", "inflight", "data", "signal", "meta", "scheduled"] {
                cmd.arg(key);
            }
            cmd.arg(1_700_000_000).arg(80).arg("worker-1");
            cmd
        };
        let args = |cmd: &Cmd| -> Vec<Vec<u8>> {
            simple_args(cmd).into_iter().map(<[u8]>::to_vec).collect()
        };
        let asked = call("q:workers", "7");
        let resized = resize_fetch(&asked, "q:workers", &fetch).expect("a fetch");
        let (resized, asked) = (args(&resized), args(&asked));
        assert_eq!(resized[11], b"20", "3 free + the held one + 16");
        assert_eq!(resized.len(), asked.len());
        for i in (0..asked.len()).filter(|&i| i != 11) {
            assert_eq!(resized[i], asked[i], "argument {i} as apalis sent it");
        }
        assert!(resize_fetch(&call("other:workers", "7"), "q:workers", &fetch).is_none());
        assert!(resize_fetch(&call("q:workers", "2"), "q:workers", &fetch).is_none());
    }

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
