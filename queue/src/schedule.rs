//! The run queue on apalis-redis, with the settings and workarounds apalis-redis 1.0.0 needs
//! (see docs/operations.md, "apalis-redis 1.0.0").
//!
//! - Every apalis setting is explicit ([`storage_config`]): queue name, batch size, heartbeat,
//!   missed heartbeats, idempotency TTL (without one, idempotency keys are deleted at once), and
//!   `lock_tasks(false)` (with leases, every fetch scans the whole active list: O(backlog)).
//! - apalis-redis promotes *all* due jobs in one Lua `unpack`, which fails at 8,000 ids and kills
//!   every worker. So nothing here ever lets thousands of jobs become due at once: pushes go in
//!   chunks, each followed by [`Queue::promote_due`] (a chunked move of due ids into the active
//!   list), and snoozed runs wait in a sorted set of our own that [`Queue::wake_due`] drips back
//!   into the queue a chunk at a time.
//! - A snooze is a re-push of the same run, never an apalis retry (apalis ignores
//!   `RetryAfterError`'s delay and retries any `Err` 25 times).
//! - apalis's vacuum reads every job's record in one script and leaves the done set growing:
//!   each finished delivery is [`Queue::retire`]d instead, and [`Queue::vacuum`] deletes the
//!   records of those whose keep is over, a bounded batch at a time.

use crate::FleetError;
use crate::lane::{ApalisConnection, FetchSize, lane_names, lane_of};
use apalis_core::task::builder::TaskBuilder;
use apalis_core::task::task_id::TaskId;
use apalis_redis::{Config, RedisStorage};
use freeway::connect::RedisConnection;
use freeway::job::RunJob;
use std::sync::Arc;
use std::time::Duration;

/// How long apalis keeps an idempotency key: longer than any run's deadline (24 h).
pub const IDEMPOTENCY_TTL: Duration = Duration::from_secs(48 * 3600);
/// How often a replica tells apalis it is alive, by default (`worker --heartbeat-s`).
pub const HEARTBEAT: Duration = Duration::from_secs(10);
/// Heartbeats a replica may miss before the board shows it as gone.
pub const MISSED_HEARTBEATS: usize = 3;
/// Ids moved or pushed per Redis call: far below Lua's 8,000-value `unpack` limit.
pub const CHUNK: usize = 1_000;
/// The most jobs a replica takes beyond its free slots (docs/design.md §4.3). apalis fetches
/// when one slot frees and keeps what it cannot start yet; each fetch takes free slots (at most
/// [`FETCH_MOST`]) and this many more (`lane::FetchSize`), so a replica holds its running jobs
/// plus at most this batch: a fixed batch as large as the concurrency let a replica claim twice its slots,
/// stranding them behind its heartbeat if it died and leaving a later replica nothing.
pub const FETCH_BATCH: usize = 16;
/// The most free slots one fetch fills. A replica with thousands free (at its start, or as a
/// wave of long calls ends) fills them a round trip at a time: with no bound, one script claimed
/// 5,000 at once, they all started together, and their first calls waited 160–260 ms for a turn
/// on the cores where 45 ms had been usual (`load --scenario latency --concurrency 5000`).
pub const FETCH_MOST: usize = 16;
/// How long apalis's records of a finished delivery (its payload, status and result) stay in
/// Redis: the store is the record of the run, so a few minutes for a look is enough, and Redis
/// holds them for the deliveries of those minutes only.
pub const KEEP_DELIVERED: Duration = Duration::from_secs(300);
/// How long a dead-lettered delivery's records stay, with the reason it was dead-lettered.
pub const KEEP_DEAD: Duration = Duration::from_secs(3600);

/// Why the queue could not push, park, wake or read.
#[derive(Debug, thiserror::Error)]
pub enum QueueError {
    /// Redis failed, or apalis on it.
    #[error(transparent)]
    Redis(#[from] FleetError),
    /// A job that does not encode as JSON.
    #[error("encoding a job: {0}")]
    Json(#[from] serde_json::Error),
}

impl From<redis::RedisError> for QueueError {
    fn from(e: redis::RedisError) -> QueueError {
        QueueError::Redis(e.into())
    }
}

impl From<apalis_redis::Error> for QueueError {
    fn from(e: apalis_redis::Error) -> QueueError {
        // `FleetError` and apalis's error are both foreign here, so no `From` between them.
        QueueError::Redis(FleetError::other(e))
    }
}

/// Every apalis-redis setting of docs/design.md §4.3, set explicitly, for the queue `name`.
pub fn storage_config(name: &str, batch_size: usize, heartbeat: Duration) -> Config {
    Config::default()
        .queue(name)
        .batch_size(batch_size.max(1))
        .heartbeat_interval(heartbeat)
        .missed_heartbeats(MISSED_HEARTBEATS)
        .lock_tasks(false)
        .emit_events(false)
        .persist_results(true)
        .idempotency_ttl(Some(IDEMPOTENCY_TTL))
}

/// Queue depths, read from apalis's keys and ours.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Depths {
    /// Due and waiting to be taken.
    pub waiting: u64,
    /// Pushed with a future run time (apalis's scheduled set, including retries).
    pub scheduled: u64,
    /// Snoozed runs waiting for a rest to end.
    pub delayed: u64,
    /// Taken by a worker and not finished.
    pub running: u64,
    /// Finished, and still in apalis's records.
    pub done: u64,
    /// Dead-lettered: failed for good, or undecodable.
    pub dead: u64,
}

/// A worker replica as apalis registered it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replica {
    /// The name the replica registered with.
    pub name: String,
    /// Its last heartbeat (apalis scores them in whole seconds).
    pub heartbeat_ms: u64,
    /// Jobs it has claimed and not finished.
    pub running: u64,
}

/// One lane of the queue ([`crate::lane`]): an apalis queue, and its settings for pushes.
#[derive(Clone)]
struct Lane {
    /// The apalis queue name, every key's prefix.
    name: String,
    config: Config,
}

impl Lane {
    fn snoozed(&self) -> String {
        format!("{}:snoozed", self.name)
    }

    fn snoozed_jobs(&self) -> String {
        format!("{}:snoozed:jobs", self.name)
    }

    /// Finished deliveries by the time their apalis records may go.
    fn retired(&self) -> String {
        format!("{}:retired", self.name)
    }
}

/// The run queue: its lanes, each an apalis queue, runs spread over them by id.
#[derive(Clone)]
pub struct Queue {
    conn: RedisConnection,
    lanes: Arc<[Lane]>,
    ns: String,
    heartbeat: Duration,
}

impl Queue {
    /// The queue of namespace `ns`, one lane.
    pub fn new(conn: RedisConnection, ns: &str) -> Queue {
        Queue {
            lanes: Arc::from([]),
            conn,
            ns: ns.to_string(),
            heartbeat: HEARTBEAT,
        }
        .with_lanes(1)
    }

    /// Spread runs over `lanes` apalis queues (`FREEWAY_QUEUES`, at most [`crate::lane::MAX_LANES`]).
    pub fn with_lanes(mut self, lanes: usize) -> Queue {
        self.lanes = lane_names(&self.ns, lanes, self.conn.is_cluster())
            .into_iter()
            .map(|name| Lane {
                config: storage_config(&name, 1, HEARTBEAT),
                name,
            })
            .collect();
        self
    }

    /// How many lanes runs are spread over.
    pub fn lanes(&self) -> usize {
        self.lanes.len()
    }

    /// The apalis queue name of lane 0: the prefix of its keys.
    pub fn name(&self) -> &str {
        &self.lanes[0].name
    }

    /// The apalis queue names of every lane.
    pub fn lane_names(&self) -> impl Iterator<Item = &str> {
        self.lanes.iter().map(|lane| lane.name.as_str())
    }

    fn lane(&self, run_id: &str) -> &Lane {
        &self.lanes[lane_of(run_id, self.lanes.len())]
    }

    /// A shorter heartbeat makes crash recovery faster (tests); docs/design.md §4.3 asks for 10 s.
    pub fn with_heartbeat(mut self, heartbeat: Duration) -> Queue {
        self.heartbeat = heartbeat;
        self
    }

    /// The apalis storage of each lane, for a worker whose concurrency limit hands out `slots`
    /// (`concurrency` of them) over all lanes: each fetch takes the slots free then (at most
    /// [`FETCH_MOST`]), shared among the lanes, and [`FETCH_BATCH`] more over all of them.
    pub fn storages(
        &self,
        slots: &Arc<tokio::sync::Semaphore>,
        concurrency: usize,
    ) -> Vec<RedisStorage<serde_json::Value, ApalisConnection>> {
        let lanes = self.lanes.len();
        let fetch = FetchSize {
            slots: slots.clone(),
            lanes,
            ahead: FETCH_BATCH,
        };
        // The most one fetch may take: the free slots it may fill, and the batch ahead.
        let batch = concurrency.min(FETCH_MOST).div_ceil(lanes) + FETCH_BATCH.div_ceil(lanes);
        self.lanes
            .iter()
            .map(|lane| {
                let config = storage_config(&lane.name, batch, self.heartbeat);
                let conn = ApalisConnection::new(self.conn.clone(), &config.workers_set())
                    .fetching(fetch.clone());
                RedisStorage::new(conn).with_config(config)
            })
            .collect()
    }

    /// The Redis namespace (`FREEWAY_NAMESPACE`).
    pub fn namespace(&self) -> &str {
        &self.ns
    }

    /// Whether Redis answers, for a health check.
    pub async fn ping(&self) -> Result<(), QueueError> {
        let mut conn = self.conn.clone();
        redis::cmd("PING").query_async::<String>(&mut conn).await?;
        Ok(())
    }

    /// Push runs now, each in its lane (the first delivery uses the idempotency key
    /// `run_id:0`).
    pub async fn push(&self, jobs: &[RunJob]) -> Result<(), QueueError> {
        let mut by_lane = vec![Vec::new(); self.lanes.len()];
        for job in jobs {
            by_lane[lane_of(&job.run_id, self.lanes.len())].push(job);
        }
        for (lane, jobs) in self.lanes.iter().zip(by_lane) {
            for chunk in jobs.chunks(CHUNK) {
                let tasks = chunk
                    .iter()
                    .map(|job| Ok(task(serde_json::to_vec(job)?, Some(delivery_key(job)))))
                    .collect::<Result<Vec<_>, QueueError>>()?;
                self.push_raw(lane, tasks).await?;
            }
        }
        Ok(())
    }

    /// Push a run again that Redis lost, under a key of its own: the run's earlier delivery keys
    /// may still be held, and would swallow the push.
    pub async fn repush(&self, job: &RunJob) -> Result<(), QueueError> {
        let key = format!("{}:reconciled:{}", job.run_id, freeway::clock::epoch_ms());
        let payload = serde_json::to_vec(job)?;
        self.push_raw(self.lane(&job.run_id), vec![task(payload, Some(key))])
            .await
    }

    /// Push raw payloads as they are, without a key, into lane 0: for tools and tests that
    /// need to put arbitrary (even malformed) jobs into the queue.
    pub async fn push_payloads(&self, payloads: Vec<Vec<u8>>) -> Result<(), QueueError> {
        for chunk in payloads.chunks(CHUNK) {
            self.push_raw(
                &self.lanes[0],
                chunk.iter().map(|p| task(p.clone(), None)).collect(),
            )
            .await?;
        }
        Ok(())
    }

    async fn push_raw(
        &self,
        lane: &Lane,
        tasks: Vec<apalis_redis::RedisTask>,
    ) -> Result<(), QueueError> {
        let mut conn = self.conn.clone();
        apalis_redis::queries::push_tasks(&mut conn, &lane.config, &tasks).await?;
        self.promote_lane(lane).await?;
        Ok(())
    }

    /// Park a run until `until_ms` (docs/design.md §4.2). The run comes back through
    /// [`Queue::wake_due`].
    pub async fn snooze(&self, job: &RunJob, until_ms: u64) -> Result<(), QueueError> {
        let mut conn = self.conn.clone();
        let lane = self.lane(&job.run_id);
        redis::pipe()
            .atomic()
            .hset(lane.snoozed_jobs(), &job.run_id, serde_json::to_vec(job)?)
            .ignore()
            .zadd(lane.snoozed(), &job.run_id, until_ms)
            .ignore()
            .query_async::<()>(&mut conn)
            .await?;
        Ok(())
    }

    /// Push back at most `limit` snoozed runs a lane whose time has come. Safe to run on every
    /// replica at once: a run pushed twice is one delivery thanks to its idempotency key.
    pub async fn wake_due(&self, now_ms: u64, limit: usize) -> Result<usize, QueueError> {
        let mut woken = 0;
        for lane in self.lanes.iter() {
            woken += self.wake_due_in(lane, now_ms, limit).await?;
        }
        Ok(woken)
    }

    async fn wake_due_in(
        &self,
        lane: &Lane,
        now_ms: u64,
        limit: usize,
    ) -> Result<usize, QueueError> {
        let mut conn = self.conn.clone();
        let ids: Vec<String> = redis::cmd("ZRANGEBYSCORE")
            .arg(lane.snoozed())
            .arg("-inf")
            .arg(now_ms)
            .arg("LIMIT")
            .arg(0)
            .arg(limit)
            .query_async(&mut conn)
            .await?;
        if ids.is_empty() {
            return Ok(0);
        }
        let payloads: Vec<Option<Vec<u8>>> = redis::cmd("HMGET")
            .arg(lane.snoozed_jobs())
            .arg(&ids)
            .query_async(&mut conn)
            .await?;
        let mut tasks = Vec::with_capacity(ids.len());
        for payload in payloads.into_iter().flatten() {
            // The key names the snooze, so every replica's copy of this wake-up is one task.
            let key = serde_json::from_slice::<RunJob>(&payload)
                .map(|j| delivery_key(&j))
                .ok();
            tasks.push(task(payload, key));
        }
        self.push_raw(lane, tasks).await?;
        redis::pipe()
            .zrem(lane.snoozed(), &ids)
            .ignore()
            .hdel(lane.snoozed_jobs(), &ids)
            .ignore()
            .query_async::<()>(&mut conn)
            .await?;
        Ok(ids.len())
    }

    /// Make one parked run due at `now_ms` (an operator's "run now"); false when it is not
    /// parked.
    pub async fn wake(&self, run_id: &str, now_ms: u64) -> Result<bool, QueueError> {
        let mut conn = self.conn.clone();
        let snoozed = self.lane(run_id).snoozed();
        let (_, parked): (u64, Option<f64>) = redis::pipe()
            .cmd("ZADD")
            .arg(&snoozed)
            .arg("XX")
            .arg(now_ms)
            .arg(run_id)
            .cmd("ZSCORE")
            .arg(&snoozed)
            .arg(run_id)
            .query_async(&mut conn)
            .await?;
        Ok(parked.is_some())
    }

    /// Drop a parked run: it was cancelled, and must not be delivered again for nothing.
    /// Returns its parked job, when it was parked and still reads as one (the slot it holds goes
    /// back to its pool).
    pub async fn forget(&self, run_id: &str) -> Result<Option<RunJob>, QueueError> {
        let mut conn = self.conn.clone();
        let lane = self.lane(run_id);
        let (parked,): (Option<Vec<u8>>,) = redis::pipe()
            .atomic()
            .hget(lane.snoozed_jobs(), run_id)
            .zrem(lane.snoozed(), run_id)
            .ignore()
            .hdel(lane.snoozed_jobs(), run_id)
            .ignore()
            .query_async(&mut conn)
            .await?;
        Ok(parked.and_then(|bytes| serde_json::from_slice(&bytes).ok()))
    }

    /// Make every parked run due at `now_ms`: a rest was lifted or cleared, and the runs it
    /// delayed may run now. Which rest parked a run is not recorded, so all wake; the ones still
    /// closed park again at pre-flight without spending a call. Returns the runs brought forward.
    pub async fn wake_parked(&self, now_ms: u64) -> Result<usize, QueueError> {
        let mut conn = self.conn.clone();
        let mut woken = 0;
        for lane in self.lanes.iter() {
            loop {
                let n: usize = BRING_FORWARD
                    .key(lane.snoozed())
                    .arg(now_ms)
                    .arg(CHUNK)
                    .invoke_async(&mut conn)
                    .await?;
                woken += n;
                if n < CHUNK {
                    break;
                }
            }
        }
        Ok(woken)
    }

    /// Move due ids from apalis's scheduled sets to their active lists, a chunk per call, until
    /// none are left: apalis's own fetch then never sees a pile of due ids it cannot unpack.
    pub async fn promote_due(&self) -> Result<usize, QueueError> {
        let mut moved = 0;
        for lane in self.lanes.iter() {
            moved += self.promote_lane(lane).await?;
        }
        Ok(moved)
    }

    async fn promote_lane(&self, lane: &Lane) -> Result<usize, QueueError> {
        let mut conn = self.conn.clone();
        let mut moved = 0;
        loop {
            let n: usize = PROMOTE
                .key(lane.config.scheduled_jobs_set())
                .key(lane.config.active_jobs_list())
                .arg(CHUNK)
                .invoke_async(&mut conn)
                .await?;
            moved += n;
            if n < CHUNK {
                return Ok(moved);
            }
        }
    }

    /// Delivery `task_id` of lane `lane` is over (its run settled, parked or was
    /// dead-lettered): apalis's records of it may go `keep` from now ([`Queue::vacuum`]).
    pub async fn retire(
        &self,
        lane: usize,
        task_id: &str,
        keep: Duration,
    ) -> Result<(), QueueError> {
        let mut conn = self.conn.clone();
        self.retire_command(lane, task_id, keep)
            .query_async::<()>(&mut conn)
            .await?;
        Ok(())
    }

    /// [`Queue::retire`] as a command, to send with others.
    pub(crate) fn retire_command(&self, lane: usize, task_id: &str, keep: Duration) -> redis::Cmd {
        let at = freeway::clock::epoch_ms() + keep.as_millis() as u64;
        let lane = &self.lanes[lane.min(self.lanes.len() - 1)];
        let mut cmd = freeway::connect::keyed("ZADD", &lane.retired());
        cmd.arg(at).arg(task_id);
        cmd
    }

    /// Delete apalis's records of deliveries retired until `now_ms`, at most `limit` of them a
    /// lane: their payload, status and result, and their ids in the done and dead sets (whose
    /// counts are then those of the last minutes). apalis's own vacuum reads every job's record
    /// in one script, which at a few thousand runs a second stalls Redis; this one reads only
    /// what it deletes. A delivery apalis has not marked finished yet is looked at again a
    /// minute later.
    pub async fn vacuum(&self, now_ms: u64, limit: usize) -> Result<usize, QueueError> {
        let mut conn = self.conn.clone();
        let mut deleted = 0;
        for lane in self.lanes.iter() {
            let meta = lane.config.job_meta_hash();
            deleted += VACUUM
                .key(lane.retired())
                .key(lane.config.job_data_hash())
                .key(&meta)
                .key(format!("{meta}:result"))
                .key(lane.config.done_jobs_set())
                .key(lane.config.dead_jobs_set())
                .arg(now_ms)
                .arg(limit)
                .invoke_async::<usize>(&mut conn)
                .await?;
        }
        Ok(deleted)
    }

    /// How many runs are in each state now, over every lane.
    pub async fn depths(&self) -> Result<Depths, QueueError> {
        Ok(self.snapshot().await?.0)
    }

    /// The depths over every lane and every registered replica, newest heartbeat first: two
    /// round trips a lane, all lanes at once.
    pub async fn snapshot(&self) -> Result<(Depths, Vec<Replica>), QueueError> {
        let lanes =
            futures_util::future::try_join_all(self.lanes.iter().map(|l| self.lane_snapshot(l)))
                .await?;
        let mut depths = Depths::default();
        let mut replicas: Vec<Replica> = Vec::new();
        for (lane, seen) in lanes {
            depths.waiting += lane.waiting;
            depths.scheduled += lane.scheduled;
            depths.delayed += lane.delayed;
            depths.running += lane.running;
            depths.done += lane.done;
            depths.dead += lane.dead;
            // A replica consumes every lane under one name.
            for replica in seen {
                match replicas.iter_mut().find(|r| r.name == replica.name) {
                    Some(known) => {
                        known.heartbeat_ms = known.heartbeat_ms.max(replica.heartbeat_ms);
                        known.running += replica.running;
                    }
                    None => replicas.push(replica),
                }
            }
        }
        replicas.sort_by_key(|r| std::cmp::Reverse(r.heartbeat_ms));
        Ok((depths, replicas))
    }

    async fn lane_snapshot(&self, lane: &Lane) -> Result<(Depths, Vec<Replica>), QueueError> {
        let mut conn = self.conn.clone();
        let c = &lane.config;
        type Counts = (u64, u64, u64, u64, u64, Vec<(String, f64)>);
        let (waiting, scheduled, delayed, done, dead, beats): Counts = redis::pipe()
            .llen(c.active_jobs_list())
            .zcard(c.scheduled_jobs_set())
            .zcard(lane.snoozed())
            .scard(c.done_jobs_set())
            .scard(c.dead_jobs_set())
            .cmd("ZRANGE")
            .arg(c.workers_set())
            .arg(0)
            .arg(-1)
            .arg("REV")
            .arg("WITHSCORES")
            .query_async(&mut conn)
            .await?;
        let running: Vec<u64> = if beats.is_empty() {
            Vec::new()
        } else {
            let mut inflight = redis::pipe();
            for (name, _) in &beats {
                inflight.scard(format!("{}:{name}", c.inflight_jobs_set()));
            }
            inflight.query_async(&mut conn).await?
        };
        let depths = Depths {
            waiting,
            scheduled,
            delayed,
            running: running.iter().sum(),
            done,
            dead,
        };
        let replicas = beats
            .into_iter()
            .zip(running)
            .map(|((name, secs), running)| Replica {
                name,
                heartbeat_ms: (secs.max(0.0) * 1000.0) as u64,
                running,
            })
            .collect();
        Ok((depths, replicas))
    }
}

/// The idempotency key of one delivery of a run: `run_id:snooze_n` (docs/design.md §4.2).
fn delivery_key(job: &RunJob) -> String {
    format!("{}:{}", job.run_id, job.snooze_n)
}

fn task(payload: Vec<u8>, key: Option<String>) -> apalis_redis::RedisTask {
    let builder = TaskBuilder::new(payload).task_id(TaskId::from_ulid(ulid::Ulid::generate()));
    match key {
        Some(k) => builder.idempotency_key(k).build(),
        None => builder.build(),
    }
}

/// Due ids from the scheduled set to the active list, at most ARGV[1] of them.
/// Sets up to ARGV[2] parked runs due later than ARGV[1] to be due at ARGV[1].
static BRING_FORWARD: std::sync::LazyLock<redis::Script> = std::sync::LazyLock::new(|| {
    redis::Script::new(
        r"
        local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. ARGV[1], '+inf', 'LIMIT', 0, tonumber(ARGV[2]))
        for _, id in ipairs(ids) do
            redis.call('ZADD', KEYS[1], 'XX', ARGV[1], id)
        end
        return #ids
        ",
    )
});

/// [`Queue::vacuum`]: KEYS retired set, data hash, meta prefix, result hash, done set, dead set;
/// ARGV now (ms), limit.
static VACUUM: std::sync::LazyLock<redis::Script> = std::sync::LazyLock::new(|| {
    redis::Script::new(
        r"
        local ids = redis.call('ZRANGEBYSCORE', KEYS[1], 0, ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
        local deleted = 0
        for _, id in ipairs(ids) do
            local meta = KEYS[3] .. ':' .. id
            local status = redis.call('HGET', meta, 'status')
            if status == 'Done' or status == 'Killed' or not status then
                redis.call('HDEL', KEYS[2], id)
                redis.call('DEL', meta)
                redis.call('HDEL', KEYS[4], id)
                redis.call('SREM', KEYS[5], id)
                redis.call('SREM', KEYS[6], id)
                redis.call('ZREM', KEYS[1], id)
                deleted = deleted + 1
            else
                redis.call('ZADD', KEYS[1], 'XX', tonumber(ARGV[1]) + 60000, id)
            end
        end
        return deleted
        ",
    )
});

static PROMOTE: std::sync::LazyLock<redis::Script> = std::sync::LazyLock::new(|| {
    redis::Script::new(
        r"
        local now = tonumber(redis.call('TIME')[1])
        local ids = redis.call('ZRANGEBYSCORE', KEYS[1], 0, now, 'LIMIT', 0, tonumber(ARGV[1]))
        if #ids > 0 then
            redis.call('RPUSH', KEYS[2], unpack(ids))
            redis.call('ZREM', KEYS[1], unpack(ids))
        end
        return #ids
        ",
    )
});
