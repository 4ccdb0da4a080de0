//! The fleet's limiter in Redis: [`RedisPacer`].
//!
//! One hash per pool instance, `ns:{pool}:pace` (the pool's hash tag, as its rests), changed only
//! by one Lua script (`pace.lua`) that reads Redis `TIME`, so replicas' clocks never matter and
//! concurrent callers are serialised by Redis: ten replicas asking at once get exactly the
//! window's room. A pool's fair-share queue (`fair.rs`) lives beside it under the same tag, so
//! the script hands slots to waiting runs in the same step that counts them.

use super::{
    DaySync, Dispatched, Headroom, Joined, Learned, LimitSource, Limits, Pacer, PoolSeen, PoolUse,
    Refusal, Reservation, SEEN_TTL_MS, Seen, Share, Slot, Stated, WINDOW_GUARD_MS, Waiter,
};
use crate::connect::RedisConnection;
use crate::error::FleetError;
use async_trait::async_trait;
use redis::Script;
use std::sync::LazyLock;

static PACE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("pace.lua")));

/// A pool leaves the list of pools with runs waiting, unless a run joined it lately.
static QUIET: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        "local s = redis.call('ZSCORE', KEYS[1], ARGV[1]) \
         if s and tonumber(s) < tonumber(ARGV[2]) then redis.call('ZREM', KEYS[1], ARGV[1]) end",
    )
});

/// The fair-share keys of a pool, after its hash and its log (see `pace.lua`).
const FAIR_KEYS: [&str; 8] = [
    "fair",
    "fair-e0",
    "fair-p0",
    "fair-e1",
    "fair-p1",
    "fair-g",
    "fair-told",
    "fair-s",
];

/// The day's counts back to zero, on a hash that exists (an HSET on one that expired would make
/// one without its TTL); the windows keep theirs.
static REOPEN_DAY: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        "if redis.call('EXISTS', KEYS[1]) == 1 then redis.call('HSET', KEYS[1], 'dn', 0, 'dt', 0) end",
    )
});

/// Pools' limiters in one Redis namespace.
#[derive(Clone)]
pub struct RedisPacer {
    conn: RedisConnection,
    ns: String,
}

impl RedisPacer {
    pub fn new(conn: RedisConnection, ns: impl Into<String>) -> Self {
        RedisPacer {
            conn,
            ns: ns.into(),
        }
    }

    /// The hash that holds `pool`'s limiter.
    pub fn key(&self, pool: &str) -> String {
        format!("{}:{{{pool}}}:pace", self.ns)
    }

    /// The sorted set of a sliding window's call moments for `pool` (same slot as its hash).
    pub fn log_key(&self, pool: &str) -> String {
        format!("{}:{{{pool}}}:pace-log", self.ns)
    }

    /// The hash of what the provider last said about `pool`.
    pub fn seen_key(&self, pool: &str) -> String {
        format!("{}:{{{pool}}}:seen", self.ns)
    }

    /// The sorted set of pools whose queues have runs waiting, by when one last joined.
    fn waiting_key(&self) -> String {
        format!("{}:fair-pools", self.ns)
    }

    /// The script for `op` on `pool`, with its keys and common arguments; an op's own arguments
    /// follow.
    fn invocation(
        &self,
        op: &str,
        pool: &str,
        limits: &Limits,
        day_end_ms: u64,
        tokens: u32,
    ) -> redis::ScriptInvocation<'static> {
        let mut invocation = PACE.prepare_invoke();
        invocation.key(self.key(pool)).key(self.log_key(pool));
        for suffix in FAIR_KEYS {
            invocation.key(format!("{}:{{{pool}}}:{suffix}", self.ns));
        }
        invocation
            .arg(op)
            .arg(limits.per_window.unwrap_or(0))
            .arg(limits.window_ms.max(1))
            .arg(u8::from(limits.rolling))
            .arg(limits.per_day.unwrap_or(0))
            .arg(day_end_ms)
            .arg(WINDOW_GUARD_MS)
            .arg(limits.tokens_per_window.unwrap_or(0))
            .arg(limits.tokens_per_day.unwrap_or(0))
            .arg(if limits.counts_tokens() { tokens } else { 0 })
            .arg(u8::from(limits.pin));
        invocation
    }

    async fn call(
        &self,
        op: &str,
        pool: &str,
        limits: &Limits,
        day_end_ms: u64,
        tokens: u32,
    ) -> Result<Vec<u64>, FleetError> {
        self.call_with(op, pool, limits, day_end_ms, tokens, &[])
            .await
    }

    async fn call_with(
        &self,
        op: &str,
        pool: &str,
        limits: &Limits,
        day_end_ms: u64,
        tokens: u32,
        more: &[i64],
    ) -> Result<Vec<u64>, FleetError> {
        let mut invocation = self.invocation(op, pool, limits, day_end_ms, tokens);
        invocation.arg(more);
        let reply: Vec<i64> = invocation.invoke_async(&mut self.conn.clone()).await?;
        Ok(reply.into_iter().map(|v| v.max(0) as u64).collect())
    }

    /// `op` asked by `who` (or by nobody).
    async fn call_as(
        &self,
        op: &str,
        pool: &str,
        limits: &Limits,
        day_end_ms: u64,
        tokens: u32,
        who: Option<&Waiter<'_>>,
    ) -> Result<Vec<u64>, FleetError> {
        let mut invocation = self.invocation(op, pool, limits, day_end_ms, tokens);
        if let Some(who) = who {
            invocation
                .arg(who.run_id)
                .arg(who.tenant)
                .arg(who.weight.max(1))
                .arg(who.lane.index())
                .arg(who.deadline_ms);
        }
        let reply: Vec<i64> = invocation.invoke_async(&mut self.conn.clone()).await?;
        Ok(reply.into_iter().map(|v| v.max(0) as u64).collect())
    }

    /// Each tenant's slots of `pool`'s window.
    async fn shares(&self, pool: &str, limits: &Limits) -> Result<Vec<Share>, FleetError> {
        let reply: Vec<String> = self
            .invocation("shares", pool, limits, 0, 0)
            .invoke_async(&mut self.conn.clone())
            .await?;
        let mut shares: Vec<Share> = reply
            .chunks_exact(2)
            .map(|pair| Share {
                tenant: pair[0].clone(),
                slots: pair[1].parse().unwrap_or(0),
            })
            .collect();
        shares.sort_by(|a, b| a.tenant.cmp(&b.tenant));
        Ok(shares)
    }
}

/// A limit the script returns, 0 meaning none.
fn stated(n: u64) -> Option<u32> {
    u32::try_from(n).ok().filter(|&n| n > 0)
}

fn to_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

fn slot(reply: &[u64]) -> Slot {
    match reply {
        [1, ..] => Slot::Now,
        [_, wait, ..] => Slot::In((*wait).max(1)),
        _ => Slot::Now,
    }
}

#[async_trait]
impl Pacer for RedisPacer {
    async fn peek_as(
        &self,
        pool: &str,
        limits: &Limits,
        day_end_ms: u64,
        tokens: u32,
        who: Option<&Waiter<'_>>,
    ) -> Result<Slot, FleetError> {
        let reply = self
            .call_as("peek", pool, limits, day_end_ms, tokens, who)
            .await?;
        Ok(slot(&reply))
    }

    async fn admit_as(
        &self,
        pool: &str,
        limits: &Limits,
        day_end_ms: u64,
        tokens: u32,
        who: Option<&Waiter<'_>>,
    ) -> Result<Slot, FleetError> {
        let reply = self
            .call_as("admit", pool, limits, day_end_ms, tokens, who)
            .await?;
        Ok(slot(&reply))
    }

    async fn join(
        &self,
        pool: &str,
        limits: &Limits,
        day_end_ms: u64,
        tokens: u32,
        who: &Waiter<'_>,
    ) -> Result<Joined, FleetError> {
        let reply = self
            .call_as("join", pool, limits, day_end_ms, tokens, Some(who))
            .await?;
        let mut conn = self.conn.clone();
        let now = crate::clock::epoch_ms();
        let _: () = redis::cmd("ZADD")
            .arg(self.waiting_key())
            .arg(now)
            .arg(pool)
            .query_async(&mut conn)
            .await?;
        Ok(match reply[..] {
            [1, _, valid_ms, ..] => Joined::Granted { valid_ms },
            [2, wait_ms, ..] => Joined::DaySpent { wait_ms },
            [_, wait_ms, ..] => Joined::Queued { wait_ms },
            _ => Joined::Queued { wait_ms: 1 },
        })
    }

    async fn dispatch(
        &self,
        pool: &str,
        limits: &Limits,
        day_end_ms: u64,
        max: u32,
    ) -> Result<Dispatched, FleetError> {
        let mut invocation = self.invocation("dispatch", pool, limits, day_end_ms, 0);
        invocation.arg(max);
        let mut reply: Vec<String> = invocation.invoke_async(&mut self.conn.clone()).await?;
        if reply.is_empty() {
            return Ok(Dispatched::default());
        }
        let waiting = reply.remove(0).parse().unwrap_or(0);
        Ok(Dispatched {
            granted: reply,
            waiting,
        })
    }

    async fn leave(
        &self,
        pool: &str,
        limits: &Limits,
        day_end_ms: u64,
        tokens: u32,
        run_id: &str,
    ) -> Result<(), FleetError> {
        let mut invocation = self.invocation("leave", pool, limits, day_end_ms, tokens);
        invocation.arg(run_id);
        let _: Vec<i64> = invocation.invoke_async(&mut self.conn.clone()).await?;
        Ok(())
    }

    async fn waiting_pools(&self) -> Result<Vec<String>, FleetError> {
        let mut conn = self.conn.clone();
        Ok(redis::cmd("ZRANGE")
            .arg(self.waiting_key())
            .arg(0)
            .arg(-1)
            .query_async(&mut conn)
            .await?)
    }

    async fn quiet(&self, pool: &str, quiet_ms: u64) -> Result<(), FleetError> {
        let before = crate::clock::epoch_ms().saturating_sub(quiet_ms);
        let _: () = QUIET
            .key(self.waiting_key())
            .arg(pool)
            .arg(before)
            .invoke_async(&mut self.conn.clone())
            .await?;
        Ok(())
    }

    async fn reserve(
        &self,
        pool: &str,
        limits: &Limits,
        day_end_ms: u64,
        tokens: u32,
    ) -> Result<Option<Reservation>, FleetError> {
        let reply = self
            .call("reserve", pool, limits, day_end_ms, tokens)
            .await?;
        Ok(match reply[..] {
            [1, wait_ms, valid_ms] => Some(Reservation { wait_ms, valid_ms }),
            _ => None,
        })
    }

    async fn spent(
        &self,
        pool: &str,
        limits: &Limits,
        day_end_ms: u64,
        delta: i64,
    ) -> Result<(), FleetError> {
        if !limits.counts_tokens() || delta == 0 {
            return Ok(());
        }
        self.call_with("spent", pool, limits, day_end_ms, 0, &[delta])
            .await?;
        Ok(())
    }

    async fn landed(
        &self,
        pool: &str,
        limits: &Limits,
        elapsed_ms: u64,
        tokens: u32,
    ) -> Result<bool, FleetError> {
        let reply = self
            .call_with("landed", pool, limits, 0, tokens, &[to_i64(elapsed_ms)])
            .await?;
        Ok(reply.first() == Some(&1))
    }

    async fn missed(
        &self,
        pool: &str,
        limits: &Limits,
        hint_ms: Option<u64>,
        lower: bool,
    ) -> Result<u32, FleetError> {
        let extra = [to_i64(hint_ms.unwrap_or(0)), i64::from(lower)];
        let reply = self.call_with("missed", pool, limits, 0, 0, &extra).await?;
        Ok(reply.first().copied().unwrap_or(0) as u32)
    }

    async fn learn(
        &self,
        pool: &str,
        limits: &Limits,
        day_end_ms: u64,
        stated: &Stated,
    ) -> Result<(), FleetError> {
        let limit = |v: Option<u32>| v.map_or(0, i64::from);
        let left = |v: Option<u32>| v.map_or(-1, i64::from);
        let source = |in_body: bool| match in_body {
            true => LimitSource::Refusal.code() as i64,
            false => LimitSource::Headers.code() as i64,
        };
        let extra = [
            limit(stated.per_window),
            limit(stated.per_day),
            limit(stated.tokens_per_window),
            left(stated.window_remaining),
            left(stated.day_remaining),
            left(stated.tokens_remaining),
            to_i64(stated.window_ends_in_ms.unwrap_or(0)),
            i64::from(stated.day_spent),
            i64::from(stated.ends_at_moment),
            source(stated.in_body.per_window),
            source(stated.in_body.tokens_per_window),
            source(stated.in_body.per_day),
        ];
        self.call_with("learn", pool, limits, day_end_ms, 0, &extra)
            .await?;
        Ok(())
    }

    async fn release(
        &self,
        pool: &str,
        limits: &Limits,
        day_end_ms: u64,
        tokens: u32,
        slot_in_ms: i64,
    ) -> Result<(), FleetError> {
        self.call_with("release", pool, limits, day_end_ms, tokens, &[slot_in_ms])
            .await?;
        Ok(())
    }

    async fn sync(
        &self,
        pool: &str,
        limits: &Limits,
        day_end_ms: u64,
        used: u64,
        limit: u64,
    ) -> Result<DaySync, FleetError> {
        let reply = self
            .call_with(
                "sync",
                pool,
                limits,
                day_end_ms,
                0,
                &[to_i64(used), to_i64(limit)],
            )
            .await?;
        let at = |i: usize| reply.get(i).copied().unwrap_or(0) == 1;
        Ok(DaySync {
            reopened: at(0) && !at(1),
            full: at(1),
        })
    }

    async fn reopen_day(&self, pool: &str) -> Result<(), FleetError> {
        let mut conn = self.conn.clone();
        let _: () = REOPEN_DAY
            .key(self.key(pool))
            .invoke_async(&mut conn)
            .await?;
        Ok(())
    }

    async fn usage(
        &self,
        pool: &str,
        limits: &Limits,
        day_end_ms: u64,
    ) -> Result<PoolUse, FleetError> {
        let reply = self.call("usage", pool, limits, day_end_ms, 0).await?;
        let at = |i: usize| reply.get(i).copied().unwrap_or(0);
        Ok(PoolUse {
            window_used: at(0) as u32,
            window_resets_in_ms: at(1),
            day_used: at(2) as u32,
            reserved: at(3) as u32,
            misses: at(4) as u32,
            window_tokens: at(5) as u32,
            day_tokens: at(6),
            learned: Learned {
                per_window: stated(at(7)),
                per_day: stated(at(8)),
                tokens_per_window: stated(at(9)),
                per_window_from: LimitSource::from_code(at(17)),
                per_day_from: LimitSource::from_code(at(18)),
                tokens_per_window_from: LimitSource::from_code(at(19)),
                working_per_window: stated(at(10)),
                at_ms: (at(11) > 0).then_some(at(11)),
                phase_from_provider: at(12) == 1,
                fixed_by_provider: at(13) == 1,
                sliding_by_provider: at(14) == 1,
            },
            waiting: at(15) as u32,
            tenants_waiting: at(16) as u32,
            shares: self.shares(pool, limits).await?,
        })
    }

    async fn saw(&self, pool: &str, seen: Seen) -> Result<(), FleetError> {
        let key = self.seen_key(pool);
        let fields: Vec<(&str, String)> = match seen {
            Seen::Headroom(h) => vec![
                ("hr", h.remaining.to_string()),
                ("hr_t", h.t_ms.to_string()),
                (
                    "hr_reset",
                    h.resets_at_ms.map_or_else(String::new, |t| t.to_string()),
                ),
            ],
            Seen::Refusal(r) => vec![
                ("r_t", r.t_ms.to_string()),
                ("r_route", r.route),
                ("r_verdict", r.verdict),
            ],
        };
        let mut conn = self.conn.clone();
        let _: () = redis::pipe()
            .hset_multiple(&key, &fields)
            .ignore()
            .pexpire(&key, SEEN_TTL_MS as i64)
            .ignore()
            .query_async(&mut conn)
            .await?;
        Ok(())
    }

    async fn seen(&self, pool: &str) -> Result<PoolSeen, FleetError> {
        let mut conn = self.conn.clone();
        let kept: std::collections::HashMap<String, String> = redis::cmd("HGETALL")
            .arg(self.seen_key(pool))
            .query_async(&mut conn)
            .await?;
        let number = |field: &str| kept.get(field).and_then(|v| v.parse::<u64>().ok());
        let headroom = kept
            .get("hr")
            .and_then(|v| v.parse().ok())
            .zip(number("hr_t"))
            .map(|(remaining, t_ms)| Headroom {
                remaining,
                t_ms,
                resets_at_ms: number("hr_reset"),
            });
        let last_429 = number("r_t").map(|t_ms| Refusal {
            t_ms,
            route: kept.get("r_route").cloned().unwrap_or_default(),
            verdict: kept.get("r_verdict").cloned().unwrap_or_default(),
        });
        Ok(PoolSeen { headroom, last_429 })
    }
}
