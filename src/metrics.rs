//! Fleet-wide counters for `/metrics`, kept in Redis.
//!
//! Calls, rests and latencies happen in the worker replicas, but the fleet should be one scrape
//! target: the producer's `/metrics`. So every replica adds to the same Redis hashes with
//! `HINCRBY` (atomic, no read-modify-write), and the producer reads them at scrape time
//! ([`Metrics::read`]). A replica sums what it counts for [`FLUSH_EVERY`] and writes the sums
//! in one pipeline: a busy replica counts a few hundred calls a flush for the price of one
//! (ten commands a run before), and a quiet one writes each count at once. Replicas need no port of their own, a replica
//! that restarts loses nothing, and the values are the fleet's totals, not one process's.
//! Histograms are fixed buckets, one hash field per bucket.
//!
//! | key | fields | counts |
//! |---|---|---|
//! | `{ns:metrics}:calls` | `["<route>","<outcome>"]` (a JSON pair) | provider calls; outcome `ok` or the verdict |
//! | `{ns:metrics}:rests` | `["<scope>","<verdict>"]` | rests written (extended) by scope and verdict |
//! | `{ns:metrics}:latency` | `le:<ms>`, `le:+Inf`, `sum`, `count` | call latency in ms |
//! | `{ns:metrics}:calls_per_run` | `le:<n>`, `le:+Inf`, `sum`, `count` | calls of each run when it settles |
//! | `{ns:metrics}:delivery` | `le:<ms>`, `le:+Inf`, `sum`, `count` | how long each delivery held a replica's slot, in ms |
//! | `{ns:metrics}:canary_failures` | `["<provider>","<verdict>"]` | canaries the provider refused or failed |
//! | `{ns:metrics}:spend` | `["<tier>","<provider>"]` | nano-dollars spent on priced routes (never a tenant: its values are unbounded) |
//! | `{ns:metrics}:minute:<m>` | `["<route>","<outcome>"]`, `["<route>","le:<ms>"]` | one minute's calls and latencies per route |
//!
//! A labelled series (a field of `calls`, `rests`, `canary_failures` or `spend`) that no replica
//! has added to for [`SERIES_KEPT_MS`] is dropped at the next scrape: each write also stamps its
//! fields in `<key>:seen` (a sorted set scored by the write's epoch ms), and [`Metrics::read`]
//! deletes what is older first. Labels are bounded by the configuration (a model no pool names is
//! counted as `other`), but configurations change, and a series for a route that was removed must
//! not live for ever. Histogram buckets are fixed and never expire (a dropped bucket would read as a
//! counter reset). A minute's hash (`m` is epoch minutes) expires [`MINUTES_KEPT`] minutes after
//! it began: the board charts the last hour from them.
//! Recording never fails a run; a failed write is logged and that count is lost.

use crate::connect::RedisConnection;
use crate::error::FleetError;
use async_trait::async_trait;
use std::collections::HashMap;
use std::sync::Mutex;

/// Upper bounds (ms) of the call-latency buckets: from a fast error to a long streamed answer.
pub const LATENCY_BUCKETS_MS: &[u64] = &[
    50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 30_000, 60_000, 120_000,
];
/// Upper bounds of the calls-per-run buckets: one call per bound up to a chat run's 7, then
/// research's 14 and 15 with a summary.
pub const CALLS_PER_RUN_BUCKETS: &[u64] = &[0, 1, 2, 3, 4, 5, 6, 7, 10, 14, 15];
/// Upper bounds (ms) of the delivery buckets: from a run that was only looked at (settled
/// already, or parked at once) to a run of several long calls.
pub const DELIVERY_BUCKETS_MS: &[u64] = &[
    5, 10, 25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 30_000, 60_000, 300_000,
];
/// The outcome of a call that succeeded; a failed call's outcome is its verdict.
pub const OK: &str = "ok";

/// The fleet's counters: what the engine records and `/metrics` reads. Recording never fails a
/// run: a count that cannot be written is logged and lost.
#[async_trait]
pub trait Metrics: Send + Sync {
    /// Add `increments` (see [`Increment`]) to the counters.
    async fn add(&self, increments: Vec<Increment>);
    /// Write the counts still held back; the worker calls it at every tick and before it exits.
    async fn flush(&self) {}
    /// Every counter, for a scrape.
    async fn read(&self) -> Result<Snapshot, FleetError>;
    /// The per-route counts of the epoch minutes `from..=to` that are still kept, by minute.
    async fn minutes(
        &self,
        from: u64,
        to: u64,
    ) -> Result<Vec<(u64, HashMap<String, u64>)>, FleetError>;
}

/// One field of one counter family gets `by` more.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Increment {
    family: &'static str,
    field: String,
    by: u64,
    /// The epoch minute of a per-minute family's hash.
    minute: Option<u64>,
}

/// The longest a count waits in a replica before it is written, while counts keep coming; the
/// worker's housekeeping writes what is left ([`Metrics::flush`]).
pub const FLUSH_EVERY: std::time::Duration = std::time::Duration::from_millis(100);

/// How long a minute of per-route counts is kept.
pub const MINUTES_KEPT: u64 = 120;

/// How long a labelled series is kept after its last count: a day.
pub const SERIES_KEPT_MS: u64 = 24 * 60 * 60 * 1_000;

/// The families whose fields are label pairs, and so expire when idle.
const LABELLED: [&str; 4] = [CALLS, RESTS, CANARY_FAILURES, SPEND];

/// Drops the fields of hash `KEYS[1]` whose stamp in `KEYS[2]` is at most `ARGV[1]`, a bounded
/// number at a time (the rest go at the next scrape).
const DROP_IDLE: &str = r"
local idle = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', ARGV[1], 'LIMIT', 0, 1000)
if #idle > 0 then
  redis.call('HDEL', KEYS[1], unpack(idle))
  redis.call('ZREM', KEYS[2], unpack(idle))
end
return #idle
";

/// One provider call at `at_ms`: `outcome` is [`OK`] or the failure's verdict.
pub fn call(route: &str, outcome: &str, latency_ms: u64, at_ms: u64) -> Vec<Increment> {
    let minute = Some(at_ms / 60_000);
    let bucket = LATENCY_BUCKETS_MS
        .iter()
        .find(|&&b| latency_ms <= b)
        .map_or_else(|| "le:+Inf".to_string(), |b| format!("le:{b}"));
    let mut add = vec![
        Increment::counter(CALLS, pair(route, outcome)),
        Increment {
            minute,
            ..Increment::counter(MINUTE, pair(route, outcome))
        },
        Increment {
            minute,
            ..Increment::counter(MINUTE, pair(route, &bucket))
        },
    ];
    add.extend(observe(LATENCY, LATENCY_BUCKETS_MS, latency_ms));
    add
}

impl Increment {
    fn counter(family: &'static str, field: String) -> Increment {
        Increment {
            family,
            field,
            by: 1,
            minute: None,
        }
    }
}

/// One route's calls in one minute.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RouteMinute {
    /// The minute's start, epoch ms.
    pub t_ms: u64,
    pub calls: u64,
    /// Calls refused for a rate limit (the rate-limit verdicts).
    pub rate_limited: u64,
    /// Calls that failed otherwise.
    pub failed: u64,
    /// The latency bucket bounds (ms) holding the median and the 95th percentile call.
    pub p50_ms: Option<u64>,
    pub p95_ms: Option<u64>,
}

/// Each route's minutes, oldest first, from the per-minute hashes (`minute` → its fields).
pub fn route_minutes(
    minutes: &[(u64, HashMap<String, u64>)],
) -> std::collections::BTreeMap<String, Vec<RouteMinute>> {
    let mut out: std::collections::BTreeMap<String, Vec<RouteMinute>> = Default::default();
    for (m, fields) in minutes {
        let mut routes: std::collections::BTreeMap<String, (RouteMinute, Vec<(u64, u64)>)> =
            Default::default();
        for (field, &n) in fields {
            let Ok([route, what]) = serde_json::from_str::<[String; 2]>(field) else {
                continue;
            };
            let (minute, buckets) = routes.entry(route).or_default();
            match what.strip_prefix("le:") {
                Some(bound) => buckets.push((bound.parse().unwrap_or(u64::MAX), n)),
                None => {
                    minute.calls += n;
                    match crate::classify::Verdict::parse(&what) {
                        None => {}
                        Some(v) if v.is_rate_limit() => minute.rate_limited += n,
                        Some(_) => minute.failed += n,
                    }
                }
            }
        }
        for (route, (mut minute, mut buckets)) in routes {
            buckets.sort_unstable();
            let total: u64 = buckets.iter().map(|(_, n)| n).sum();
            let quantile = |q: f64| {
                let rank = (q * total as f64).ceil().max(1.0) as u64;
                let mut seen = 0;
                buckets.iter().find_map(|&(bound, n)| {
                    seen += n;
                    (seen >= rank).then_some(bound)
                })
            };
            minute.t_ms = m * 60_000;
            minute.p50_ms = quantile(0.5);
            minute.p95_ms = quantile(0.95);
            out.entry(route).or_default().push(minute);
        }
    }
    out
}

/// A rest written (or extended) for a failure of `verdict`; `scope` is `pool`, `route` or
/// `connection`.
pub fn rest(scope: &str, verdict: &str) -> Vec<Increment> {
    vec![Increment::counter(RESTS, pair(scope, verdict))]
}

/// A provider's canary failed with `verdict`.
pub fn canary_failure(provider: &str, verdict: &str) -> Vec<Increment> {
    vec![Increment::counter(CANARY_FAILURES, pair(provider, verdict))]
}

/// A priced call of a run of `tier` on `provider` cost `nanos` nano-dollars.
pub fn spend(tier: &str, provider: &str, nanos: u64) -> Vec<Increment> {
    vec![Increment {
        by: nanos,
        ..Increment::counter(SPEND, pair(tier, provider))
    }]
}

/// A delivery held a replica's slot for `held_ms`, from the start of its handler to its
/// retirement (apalis's own bookkeeping around the handler is not counted): the sum over a span of time, divided by the slots, is how busy they were.
pub fn delivery(held_ms: u64) -> Vec<Increment> {
    observe(DELIVERY, DELIVERY_BUCKETS_MS, held_ms)
}

/// A run settled (finished, refused or paused for an approval) after `calls` calls in all.
pub fn run(calls: u32) -> Vec<Increment> {
    observe(CALLS_PER_RUN, CALLS_PER_RUN_BUCKETS, u64::from(calls))
}

const CALLS: &str = "calls";
const RESTS: &str = "rests";
const LATENCY: &str = "latency";
const CALLS_PER_RUN: &str = "calls_per_run";
const DELIVERY: &str = "delivery";
const CANARY_FAILURES: &str = "canary_failures";
const SPEND: &str = "spend";
const MINUTE: &str = "minute";

/// The counters in Redis hashes, one per family (see the module's table).
#[derive(Clone)]
pub struct RedisMetrics {
    conn: RedisConnection,
    ns: String,
    held: std::sync::Arc<Mutex<Held>>,
}

/// The sums not yet written, by Redis key and field.
struct Held {
    sums: HashMap<(String, String), u64>,
    minutes: Vec<u64>,
    last_write: std::time::Instant,
}

/// A counter with two labels, as [`Metrics::read`] returns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Labelled {
    pub labels: [String; 2],
    pub value: u64,
}

/// A histogram: `cumulative[i]` observations were at most `bounds[i]`; `count` is the `+Inf`
/// bucket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Histogram {
    pub bounds: &'static [u64],
    pub cumulative: Vec<u64>,
    pub sum: u64,
    pub count: u64,
}

/// Every counter at one moment (near enough: the hashes are read in one pipeline).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    /// `[route, outcome]`, sorted.
    pub calls: Vec<Labelled>,
    /// `[scope, verdict]`, sorted.
    pub rests: Vec<Labelled>,
    pub latency_ms: Histogram,
    pub calls_per_run: Histogram,
    pub delivery_ms: Histogram,
    /// `[provider, verdict]`, sorted.
    pub canary_failures: Vec<Labelled>,
    /// `[tier, provider]`, in nano-dollars, sorted.
    pub spend_nanos: Vec<Labelled>,
}

impl RedisMetrics {
    pub fn new(conn: RedisConnection, ns: &str) -> RedisMetrics {
        let held = Held {
            sums: HashMap::new(),
            minutes: Vec::new(),
            // The first count is written at once.
            last_write: std::time::Instant::now()
                .checked_sub(FLUSH_EVERY)
                .unwrap_or_else(std::time::Instant::now),
        };
        RedisMetrics {
            conn,
            ns: ns.to_string(),
            held: std::sync::Arc::new(Mutex::new(held)),
        }
    }

    /// Add `increments` to the held sums; the sums as one pipeline when a write is due (or
    /// `always`), under one lock.
    fn hold(&self, increments: Vec<Increment>, always: bool) -> Option<redis::Pipeline> {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        for i in increments {
            if let Some(m) = i.minute.filter(|m| !held.minutes.contains(m)) {
                held.minutes.push(m);
            }
            *held.sums.entry((self.key_of(&i), i.field)).or_default() += i.by;
        }
        if held.sums.is_empty() || !(always || held.last_write.elapsed() >= FLUSH_EVERY) {
            return None;
        }
        held.last_write = std::time::Instant::now();
        let now_ms = crate::clock::epoch_ms();
        let mut pipe = redis::pipe();
        let mut seen: HashMap<String, Vec<(u64, String)>> = HashMap::new();
        for ((key, field), by) in held.sums.drain() {
            pipe.hincr(&key, &field, by).ignore();
            if LABELLED.iter().any(|f| key == self.key(f)) {
                seen.entry(format!("{key}:seen"))
                    .or_default()
                    .push((now_ms, field));
            }
        }
        for (key, stamps) in seen {
            pipe.zadd_multiple(key, &stamps).ignore();
        }
        for m in held.minutes.drain(..) {
            let expires_s = (m + MINUTES_KEPT) * 60;
            pipe.cmd("EXPIREAT")
                .arg(self.minute_key(m))
                .arg(expires_s)
                .ignore();
        }
        Some(pipe)
    }

    async fn write(&self, pipe: redis::Pipeline) {
        let mut conn = self.conn.clone();
        if let Err(error) = pipe.query_async::<()>(&mut conn).await {
            tracing::warn!(%error, "metrics: cannot count");
        }
    }

    /// Every key of the fleet's counters carries one hash tag, `{ns:metrics}`, so that a write
    /// or a read of them is one pipeline on a cluster too.
    fn key(&self, family: &str) -> String {
        format!("{{{}:metrics}}:{family}", self.ns)
    }

    fn minute_key(&self, m: u64) -> String {
        format!("{{{}:metrics}}:{MINUTE}:{m}", self.ns)
    }

    fn key_of(&self, i: &Increment) -> String {
        match i.minute {
            Some(m) => self.minute_key(m),
            None => self.key(i.family),
        }
    }
}

#[async_trait]
impl Metrics for RedisMetrics {
    async fn add(&self, increments: Vec<Increment>) {
        if let Some(pipe) = self.hold(increments, false) {
            self.write(pipe).await;
        }
    }

    async fn flush(&self) {
        if let Some(pipe) = self.hold(Vec::new(), true) {
            self.write(pipe).await;
        }
    }

    async fn read(&self) -> Result<Snapshot, FleetError> {
        let mut conn = self.conn.clone();
        let cutoff = crate::clock::epoch_ms().saturating_sub(SERIES_KEPT_MS);
        let drop_idle = redis::Script::new(DROP_IDLE);
        for family in LABELLED {
            let key = self.key(family);
            drop_idle
                .key(&key)
                .key(format!("{key}:seen"))
                .arg(cutoff)
                .invoke_async::<u64>(&mut conn)
                .await?;
        }
        let families: [Fields; 7] = redis::pipe()
            .hgetall(self.key(CALLS))
            .hgetall(self.key(RESTS))
            .hgetall(self.key(LATENCY))
            .hgetall(self.key(CALLS_PER_RUN))
            .hgetall(self.key(DELIVERY))
            .hgetall(self.key(CANARY_FAILURES))
            .hgetall(self.key(SPEND))
            .query_async::<(Fields, Fields, Fields, Fields, Fields, Fields, Fields)>(&mut conn)
            .await?
            .into();
        Ok(snapshot(families.each_ref()))
    }

    async fn minutes(
        &self,
        from: u64,
        to: u64,
    ) -> Result<Vec<(u64, HashMap<String, u64>)>, FleetError> {
        let mut pipe = redis::pipe();
        let span: Vec<u64> = (from..=to).collect();
        for m in &span {
            pipe.hgetall(self.minute_key(*m));
        }
        let mut conn = self.conn.clone();
        let hashes: Vec<Fields> = pipe.query_async(&mut conn).await?;
        Ok(span
            .into_iter()
            .zip(hashes)
            .filter(|(_, f)| !f.is_empty())
            .collect())
    }
}

type Fields = HashMap<String, u64>;

/// The counters in one process, for tests that need no server.
#[derive(Default)]
pub struct MemoryMetrics {
    families: Mutex<HashMap<&'static str, Fields>>,
    minutes: Mutex<std::collections::BTreeMap<u64, Fields>>,
}

#[async_trait]
impl Metrics for MemoryMetrics {
    async fn add(&self, increments: Vec<Increment>) {
        let mut families = self.families.lock().unwrap_or_else(|e| e.into_inner());
        let mut minutes = self.minutes.lock().unwrap_or_else(|e| e.into_inner());
        for i in increments {
            let fields = match i.minute {
                Some(m) => minutes.entry(m).or_default(),
                None => families.entry(i.family).or_default(),
            };
            *fields.entry(i.field).or_default() += i.by;
        }
    }

    async fn read(&self) -> Result<Snapshot, FleetError> {
        let families = self.families.lock().unwrap_or_else(|e| e.into_inner());
        let empty = Fields::new();
        let family = |name| families.get(name).unwrap_or(&empty);
        Ok(snapshot([
            family(CALLS),
            family(RESTS),
            family(LATENCY),
            family(CALLS_PER_RUN),
            family(DELIVERY),
            family(CANARY_FAILURES),
            family(SPEND),
        ]))
    }

    async fn minutes(
        &self,
        from: u64,
        to: u64,
    ) -> Result<Vec<(u64, HashMap<String, u64>)>, FleetError> {
        let minutes = self.minutes.lock().unwrap_or_else(|e| e.into_inner());
        Ok(minutes
            .range(from..=to)
            .map(|(m, f)| (*m, f.clone()))
            .collect())
    }
}

/// The counters from their families, in the order the module's table lists them.
fn snapshot(
    [
        calls,
        rests,
        latency,
        per_run,
        delivery,
        canary_failures,
        spend,
    ]: [&Fields; 7],
) -> Snapshot {
    Snapshot {
        delivery_ms: histogram(delivery, DELIVERY_BUCKETS_MS),
        spend_nanos: labelled(spend),
        calls: labelled(calls),
        rests: labelled(rests),
        latency_ms: histogram(latency, LATENCY_BUCKETS_MS),
        calls_per_run: histogram(per_run, CALLS_PER_RUN_BUCKETS),
        canary_failures: labelled(canary_failures),
    }
}

/// The field of a two-label counter: JSON, so no label value can forge another's field.
fn pair(a: &str, b: &str) -> String {
    serde_json::json!([a, b]).to_string()
}

/// One observation of a histogram: its bucket (the first bound it fits), sum and count.
fn observe(family: &'static str, bounds: &[u64], value: u64) -> Vec<Increment> {
    let bucket = bounds
        .iter()
        .find(|&&b| value <= b)
        .map_or_else(|| "le:+Inf".to_string(), |b| format!("le:{b}"));
    [
        (bucket, 1),
        ("sum".to_string(), value),
        ("count".to_string(), 1),
    ]
    .into_iter()
    .map(|(field, by)| Increment {
        family,
        field,
        by,
        minute: None,
    })
    .collect()
}

fn labelled(fields: &Fields) -> Vec<Labelled> {
    let mut out: Vec<Labelled> = fields
        .iter()
        .filter_map(|(field, &value)| {
            let [a, b]: [String; 2] = serde_json::from_str(field).ok()?;
            Some(Labelled {
                labels: [a, b],
                value,
            })
        })
        .collect();
    out.sort_by(|x, y| x.labels.cmp(&y.labels));
    out
}

fn histogram(fields: &HashMap<String, u64>, bounds: &'static [u64]) -> Histogram {
    let mut running = 0;
    let cumulative = bounds
        .iter()
        .map(|b| {
            running += fields.get(&format!("le:{b}")).copied().unwrap_or(0);
            running
        })
        .collect();
    Histogram {
        bounds,
        cumulative,
        sum: fields.get("sum").copied().unwrap_or(0),
        count: fields.get("count").copied().unwrap_or(0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn each_routes_minute_counts_its_calls_by_kind_with_its_latency_quantiles() {
        let m = MemoryMetrics::default();
        let minute = 29_000_000;
        let at = minute * 60_000 + 5_000;
        for (outcome, latency) in [
            ("ok", 40),
            ("ok", 90),
            ("ok", 900),
            ("account", 60),
            ("server", 3_000),
        ] {
            m.add(call("platform:openrouter/a", outcome, latency, at))
                .await;
        }
        m.add(call("platform:openrouter/b", "ok", 20, at + 60_000))
            .await;
        let minutes = m.minutes(minute - 1, minute + 1).await.unwrap();
        assert_eq!(
            minutes.iter().map(|(m, _)| *m).collect::<Vec<_>>(),
            [minute, minute + 1]
        );
        let routes = route_minutes(&minutes);
        let a = &routes["platform:openrouter/a"][0];
        assert_eq!(
            (a.t_ms, a.calls, a.rate_limited, a.failed),
            (minute * 60_000, 5, 1, 1)
        );
        assert_eq!((a.p50_ms, a.p95_ms), (Some(100), Some(5_000)), "{a:?}");
        let b = &routes["platform:openrouter/b"];
        assert_eq!((b.len(), b[0].calls, b[0].p95_ms), (1, 1, Some(50)));
    }

    #[test]
    fn buckets_accumulate_and_labels_parse_back() {
        let fields: HashMap<String, u64> = [("le:1", 2), ("le:3", 1), ("le:+Inf", 1)]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .chain([("sum".to_string(), 30), ("count".to_string(), 4)])
            .collect();
        let h = histogram(&fields, &[1, 2, 3]);
        assert_eq!(h.cumulative, vec![2, 2, 3]);
        assert_eq!((h.sum, h.count), (30, 4));

        let fields: HashMap<String, u64> = [
            (pair("b/m", "ok"), 2),
            (pair("a/m:free", "account"), 1),
            ("not json".to_string(), 9),
        ]
        .into_iter()
        .collect();
        let got = labelled(&fields);
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].labels, ["a/m:free".to_string(), "account".into()]);
        assert_eq!(got[1].value, 2);
    }
}
