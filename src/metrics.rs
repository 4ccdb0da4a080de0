//! Fleet-wide counters for `/metrics`, kept in Redis.
//!
//! Calls, rests and latencies happen in the worker replicas, but the fleet should be one scrape
//! target: the producer's `/metrics`. So every replica adds to the same Redis hashes with
//! `HINCRBY` (atomic, no read-modify-write, one pipelined round trip per record), and the producer
//! reads them at scrape time ([`Metrics::read`]). Replicas need no port of their own, a replica
//! that restarts loses nothing, and the values are the fleet's totals, not one process's.
//! Histograms are fixed buckets, one hash field per bucket.
//!
//! | key | fields | counts |
//! |---|---|---|
//! | `ns:metrics:calls` | `["<route>","<outcome>"]` (a JSON pair) | provider calls; outcome `ok` or the verdict |
//! | `ns:metrics:rests` | `["<scope>","<verdict>"]` | rests written (extended) by scope and verdict |
//! | `ns:metrics:latency` | `le:<ms>`, `le:+Inf`, `sum`, `count` | call latency in ms |
//! | `ns:metrics:calls_per_run` | `le:<n>`, `le:+Inf`, `sum`, `count` | calls of each run when it settles |
//! | `ns:metrics:canary_failures` | `["<provider>","<verdict>"]` | canaries the provider refused or failed |
//!
//! The keys never expire: they are counters, and their size is bounded by the routes in use.
//! Recording never fails a run; a failed write is logged and that count is lost.

use crate::fleet::FleetError;
use async_trait::async_trait;
use redis::aio::ConnectionManager;
use std::collections::HashMap;
use std::sync::Mutex;

/// Upper bounds (ms) of the call-latency buckets: from a fast error to a long streamed answer.
pub const LATENCY_BUCKETS_MS: &[u64] = &[
    50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 30_000, 60_000, 120_000,
];
/// Upper bounds of the calls-per-run buckets: one call per bound up to a chat run's 7, then
/// research's 14 and 15 with a summary.
pub const CALLS_PER_RUN_BUCKETS: &[u64] = &[0, 1, 2, 3, 4, 5, 6, 7, 10, 14, 15];
/// The outcome of a call that succeeded; a failed call's outcome is its verdict.
pub const OK: &str = "ok";

/// The fleet's counters: what the engine records and `/metrics` reads. Recording never fails a
/// run: a count that cannot be written is logged and lost.
#[async_trait]
pub trait Metrics: Send + Sync {
    /// Add `increments` (see [`Increment`]) to the counters.
    async fn add(&self, increments: Vec<Increment>);
    /// Every counter, for a scrape.
    async fn read(&self) -> Result<Snapshot, FleetError>;
}

/// One field of one counter family gets `by` more.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Increment {
    family: &'static str,
    field: String,
    by: u64,
}

/// One provider call: `outcome` is [`OK`] or the failure's verdict.
pub fn call(route: &str, outcome: &str, latency_ms: u64) -> Vec<Increment> {
    let mut add = vec![Increment {
        family: CALLS,
        field: pair(route, outcome),
        by: 1,
    }];
    add.extend(observe(LATENCY, LATENCY_BUCKETS_MS, latency_ms));
    add
}

/// A rest written (or extended) for a failure of `verdict`; `scope` is `pool`, `route` or
/// `connection`.
pub fn rest(scope: &str, verdict: &str) -> Vec<Increment> {
    vec![Increment {
        family: RESTS,
        field: pair(scope, verdict),
        by: 1,
    }]
}

/// A provider's canary failed with `verdict`.
pub fn canary_failure(provider: &str, verdict: &str) -> Vec<Increment> {
    vec![Increment {
        family: CANARY_FAILURES,
        field: pair(provider, verdict),
        by: 1,
    }]
}

/// A run settled (finished, refused or paused for an approval) after `calls` calls in all.
pub fn run(calls: u32) -> Vec<Increment> {
    observe(CALLS_PER_RUN, CALLS_PER_RUN_BUCKETS, u64::from(calls))
}

const CALLS: &str = "calls";
const RESTS: &str = "rests";
const LATENCY: &str = "latency";
const CALLS_PER_RUN: &str = "calls_per_run";
const CANARY_FAILURES: &str = "canary_failures";

/// The counters in Redis hashes, one per family (see the module's table).
#[derive(Clone)]
pub struct RedisMetrics {
    conn: ConnectionManager,
    ns: String,
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
    /// `[provider, verdict]`, sorted.
    pub canary_failures: Vec<Labelled>,
}

impl RedisMetrics {
    pub fn new(conn: ConnectionManager, ns: &str) -> RedisMetrics {
        RedisMetrics {
            conn,
            ns: ns.to_string(),
        }
    }

    fn key(&self, family: &str) -> String {
        format!("{}:metrics:{family}", self.ns)
    }
}

#[async_trait]
impl Metrics for RedisMetrics {
    async fn add(&self, increments: Vec<Increment>) {
        let mut pipe = redis::pipe();
        for i in &increments {
            pipe.hincr(self.key(i.family), &i.field, i.by).ignore();
        }
        let mut conn = self.conn.clone();
        if let Err(error) = pipe.query_async::<()>(&mut conn).await {
            let family = increments.first().map_or("", |i| i.family);
            tracing::warn!(%error, family, "metrics: cannot count");
        }
    }

    async fn read(&self) -> Result<Snapshot, FleetError> {
        let mut conn = self.conn.clone();
        let families: [Fields; 5] = redis::pipe()
            .hgetall(self.key(CALLS))
            .hgetall(self.key(RESTS))
            .hgetall(self.key(LATENCY))
            .hgetall(self.key(CALLS_PER_RUN))
            .hgetall(self.key(CANARY_FAILURES))
            .query_async::<(Fields, Fields, Fields, Fields, Fields)>(&mut conn)
            .await?
            .into();
        Ok(snapshot(families.each_ref()))
    }
}

type Fields = HashMap<String, u64>;

/// The counters in one process, for tests that need no server.
#[derive(Default)]
pub struct MemoryMetrics {
    families: Mutex<HashMap<&'static str, Fields>>,
}

#[async_trait]
impl Metrics for MemoryMetrics {
    async fn add(&self, increments: Vec<Increment>) {
        let mut families = self.families.lock().unwrap_or_else(|e| e.into_inner());
        for i in increments {
            *families
                .entry(i.family)
                .or_default()
                .entry(i.field)
                .or_default() += i.by;
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
            family(CANARY_FAILURES),
        ]))
    }
}

/// The counters from their families, in the order the module's table lists them.
fn snapshot([calls, rests, latency, per_run, canary_failures]: [&Fields; 5]) -> Snapshot {
    Snapshot {
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
    .map(|(field, by)| Increment { family, field, by })
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
