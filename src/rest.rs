//! Rests in Redis (docs/design.md §3 "Rest semantics"): pool rests, route rests, connection
//! circuits and ambiguous evidence, shared by every replica.
//!
//! A rest is what stops the fleet from spending calls into a quota that is already closed, so it
//! must hold for every replica at once and survive any of them: it lives in Redis, as a key whose
//! TTL is the rest. Every write is a Lua script that only extends (the new expiry is the longer of
//! the current and the requested one, clamped to [1 s, cap]) with the time taken from Redis
//! `TIME`, so concurrent writers keep the longest rest and replicas' clocks never matter. The only
//! way to shorten a rest is [`Rests::clear`], the operator's explicit clear.
//!
//! # Key layout
//!
//! `ns` is the namespace (`FREEWAY_NAMESPACE`, default `freeway`). The part in braces is the Redis
//! Cluster hash tag: every key of one pool shares it, so the evidence script, which touches the
//! evidence and the pool rest together, runs on a cluster too.
//!
//! | key | type | what |
//! |---|---|---|
//! | `ns:{pool}:rest` | string + PX | pool rest, e.g. `freeway:{openrouter-free}:rest` |
//! | `ns:{pool}:route:<route_key>` | string + PX | route rest of a shared route (all users) |
//! | `ns:{pool}:evidence` | ZSET | ambiguous evidence: member `<user_id>:<unique>`, score Redis ms |
//! | `ns:{route:<route_key>}:rest` | string + PX | route rest of an off-quota route |
//! | `ns:{<connection>}:circuit` | string + PX | connection circuit (billing, auth): `<connection>` is `platform:<provider>` or `conn:<conn_id>` |
//! | `ns:rests` | ZSET | index for [`Rests::list`]: member = rest key, score = expiry in Redis ms |
//!
//! Rest values are `{"reason":…,"set_at_ms":…}`: why and when, never a key or a prompt.
//!
//! The index exists so that listing rests never SCANs the keyspace, which also holds the queue,
//! every run's event stream and the store's caches: a SCAN would cost time in proportion to all
//! of that on every `GET /v1/rests` and board refresh. It is updated right after each write, in a
//! separate command (it lives in another slot, and it is a listing aid, not part of the atomic
//! rest); its members are pruned by expiry on every write and by PTTL on every listing, and the
//! index key itself expires an hour after the last write, when every rest it lists has expired.
//!
//! Namespaces and pool names must not contain `{` or `}`, and pool names must not start with
//! `route:`, `conn:` or `platform:`: the hash tags and the parsing of listed keys rely on it.

use crate::classify::{
    CIRCUIT_MS, EVIDENCE_MIN_ENTRIES, EVIDENCE_MIN_USERS, EVIDENCE_POOL_REST_MS,
    EVIDENCE_WINDOW_MS, MIN_REST_MS, POOL_REST_CAP_MS, RestLength, RestScope,
};
use crate::route::Route;
use redis::aio::ConnectionManager;
use redis::{ErrorKind, RedisError, Script, Value};
use std::collections::HashMap;
use std::sync::LazyLock;

static WRITE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("rest/extend.lua"),
        include_str!("rest/write.lua")
    ))
});
static EVIDENCE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("rest/extend.lua"),
        include_str!("rest/evidence.lua")
    ))
});

/// The evidence ZSET outlives its window so a quiet pool's evidence disappears on its own.
const EVIDENCE_TTL_MS: u64 = 2 * EVIDENCE_WINDOW_MS;
/// The index outlives the longest rest it can list.
const INDEX_TTL_MS: u64 = CIRCUIT_MS + 60_000;
/// The reason stored with a pool rest that corroborated evidence called for.
const EVIDENCE_REASON: &str = "ambiguous rate limits from several users";

#[derive(Debug, thiserror::Error)]
#[error("redis: {0}")]
pub struct RestError(#[from] pub redis::RedisError);

/// What kind of rest closes a route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RestKind {
    Pool,
    Route,
    Circuit,
}

impl RestKind {
    /// The scope name `list`, `clear` and `DELETE /v1/rests/{scope}/{key}` use.
    pub fn scope_name(self) -> &'static str {
        match self {
            RestKind::Pool => "pool",
            RestKind::Route => "route",
            RestKind::Circuit => "connection",
        }
    }
}

/// Why a route is closed right now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Closure {
    pub kind: RestKind,
    pub remaining_ms: u64,
    pub reason: String,
}

impl Closure {
    /// A closure that never ends: a route this run must not try again, whatever Redis says.
    pub fn forever(reason: &str) -> Closure {
        Closure {
            kind: RestKind::Route,
            remaining_ms: u64::MAX,
            reason: reason.to_string(),
        }
    }
}

/// An active rest, as `GET /v1/rests` and the board list them.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ActiveRest {
    /// `pool`, `route` or `connection`.
    pub scope: String,
    pub key: String,
    pub remaining_ms: u64,
    pub reason: String,
}

#[derive(Clone)]
pub struct Rests {
    conn: ConnectionManager,
    ns: String,
}

impl Rests {
    pub fn new(conn: ConnectionManager, ns: impl Into<String>) -> Self {
        Self {
            conn,
            ns: ns.into(),
        }
    }

    /// The Redis key that holds the rest of `scope` (see the module's key layout); `None` for
    /// [`RestScope::None`].
    pub fn key_for(&self, scope: &RestScope) -> Option<String> {
        rest_key(&self.ns, scope)
    }

    /// The ZSET of ambiguous evidence against `pool`.
    pub fn evidence_key(&self, pool: &str) -> String {
        format!("{}:{{{pool}}}:evidence", self.ns)
    }

    /// The index of rest keys that [`Rests::list`] reads.
    pub fn index_key(&self) -> String {
        format!("{}:rests", self.ns)
    }

    /// The fleet's counters, in the same Redis and namespace: whoever writes rests counts them
    /// (see [`crate::metrics`]).
    pub fn metrics(&self) -> crate::metrics::Metrics {
        crate::metrics::Metrics::new(self.conn.clone(), &self.ns)
    }

    /// Extend (never shorten) the rest of `scope`; returns the remaining ms after the write.
    pub async fn write(
        &self,
        scope: &RestScope,
        length: RestLength,
        reason: &str,
    ) -> Result<u64, RestError> {
        let Some(key) = self.key_for(scope) else {
            return Ok(0);
        };
        let (mode, ms) = match length {
            RestLength::For(ms) => ("for", ms),
            RestLength::Until(at_ms) => ("until", at_ms),
        };
        let mut conn = self.conn.clone();
        let (remaining, now): (i64, i64) = WRITE
            .key(&key)
            .arg(mode)
            .arg(ms)
            .arg(MIN_REST_MS)
            .arg(scope.cap_ms())
            .arg(reason)
            .invoke_async(&mut conn)
            .await?;
        let remaining = non_negative(remaining);
        self.index(&key, remaining, now).await;
        Ok(remaining)
    }

    /// Record ambiguous evidence against `pool`; returns the pool rest's remaining ms when the
    /// evidence is corroborated and the pool now rests.
    ///
    /// `unique` names this failure (e.g. the run and attempt); recording the same one twice counts
    /// once, so a redelivered job cannot corroborate itself.
    pub async fn record_evidence(
        &self,
        pool: &str,
        user_id: &str,
        unique: &str,
    ) -> Result<Option<u64>, RestError> {
        // The user is read back as everything before the member's last ':'.
        let member = format!("{user_id}:{}", unique.replace(':', "_"));
        let rest_key = pool_key(&self.ns, pool);
        let mut conn = self.conn.clone();
        let (remaining, now): (i64, i64) = EVIDENCE
            .key(self.evidence_key(pool))
            .key(&rest_key)
            .arg(member)
            .arg(EVIDENCE_WINDOW_MS)
            .arg(EVIDENCE_MIN_ENTRIES)
            .arg(EVIDENCE_MIN_USERS)
            .arg(EVIDENCE_POOL_REST_MS)
            .arg(MIN_REST_MS)
            .arg(POOL_REST_CAP_MS)
            .arg(EVIDENCE_TTL_MS)
            .arg(EVIDENCE_REASON)
            .invoke_async(&mut conn)
            .await?;
        if remaining < 0 {
            return Ok(None);
        }
        let remaining = non_negative(remaining);
        self.index(&rest_key, remaining, now).await;
        Ok(Some(remaining))
    }

    /// For each route, `None` when open or the longest closure that applies: its route rest, its
    /// pool's rest (shared routes) and its connection's circuit. One round trip for the chain.
    pub async fn closures(&self, routes: &[Route]) -> Result<Vec<Option<Closure>>, RestError> {
        let mut keys: Vec<String> = Vec::new();
        let mut slots: HashMap<String, usize> = HashMap::new();
        let mut slot = |key: String| -> usize {
            let next = slots.len();
            *slots.entry(key.clone()).or_insert_with(|| {
                keys.push(key);
                next
            })
        };
        // Candidates per route, in the order that wins a tie: the pool first, as it says most.
        let mut candidates: Vec<Vec<(RestKind, usize)>> = Vec::with_capacity(routes.len());
        for route in routes {
            let mut mine = Vec::with_capacity(3);
            if let Some(pool) = &route.pool {
                mine.push((RestKind::Pool, slot(pool_key(&self.ns, pool))));
            }
            let circuit = RestScope::Connection(route.connection_scope());
            let route_scope = RestScope::Route {
                pool: route.pool.clone(),
                route_key: route.key(),
            };
            for (kind, scope) in [(RestKind::Circuit, circuit), (RestKind::Route, route_scope)] {
                if let Some(key) = self.key_for(&scope) {
                    mine.push((kind, slot(key)));
                }
            }
            candidates.push(mine);
        }
        let states = self.read_rests(&keys).await?;
        Ok(candidates
            .into_iter()
            .map(|mine| {
                let mut best: Option<Closure> = None;
                for (kind, index) in mine {
                    if let Some((remaining_ms, reason)) = &states[index]
                        && best.as_ref().is_none_or(|b| *remaining_ms > b.remaining_ms)
                    {
                        best = Some(Closure {
                            kind,
                            remaining_ms: *remaining_ms,
                            reason: reason.clone(),
                        });
                    }
                }
                best
            })
            .collect())
    }

    /// The pool's remaining rest in ms, if it rests.
    pub async fn pool_rest(&self, pool: &str) -> Result<Option<u64>, RestError> {
        let key = pool_key(&self.ns, pool);
        let mut conn = self.conn.clone();
        let pttl: i64 = redis::cmd("PTTL").arg(&key).query_async(&mut conn).await?;
        Ok((pttl > 0).then_some(pttl as u64))
    }

    /// Every active rest and circuit, sorted by scope and key.
    pub async fn list(&self) -> Result<Vec<ActiveRest>, RestError> {
        let index = self.index_key();
        let mut conn = self.conn.clone();
        let members: Vec<String> = redis::cmd("ZRANGE")
            .arg(&index)
            .arg(0)
            .arg(-1)
            .query_async(&mut conn)
            .await?;
        let states = self.read_rests(&members).await?;
        let mut active = Vec::new();
        let mut gone = Vec::new();
        for (key, state) in members.iter().zip(states) {
            match (parse_rest_key(&self.ns, key), state) {
                (Some((kind, name)), Some((remaining_ms, reason))) => active.push(ActiveRest {
                    scope: kind.scope_name().to_string(),
                    key: name,
                    remaining_ms,
                    reason,
                }),
                _ => gone.push(key.as_str()),
            }
        }
        if !gone.is_empty() {
            let _: () = redis::cmd("ZREM")
                .arg(&index)
                .arg(&gone)
                .query_async(&mut conn)
                .await?;
        }
        active.sort_by(|a, b| (&a.scope, &a.key).cmp(&(&b.scope, &b.key)));
        Ok(active)
    }

    /// The operator's clear: the only way to shorten a rest. `scope` and `key` are as
    /// [`Rests::list`] shows them (`pool`/`route`/`connection`); returns whether a rest was
    /// removed. Clearing a pool also drops its evidence, so old evidence cannot close it again
    /// at once. An unknown scope removes nothing.
    pub async fn clear(&self, scope: &str, key: &str) -> Result<bool, RestError> {
        let mut conn = self.conn.clone();
        let index = self.index_key();
        let targets: Vec<String> = match scope {
            "pool" => vec![pool_key(&self.ns, key)],
            "connection" => vec![circuit_key(&self.ns, key)],
            "route" => {
                // A shared route's rest sits under its pool's tag, which the route key does not
                // name: find it in the index.
                let members: Vec<String> = redis::cmd("ZRANGE")
                    .arg(&index)
                    .arg(0)
                    .arg(-1)
                    .query_async(&mut conn)
                    .await?;
                let mut targets: Vec<String> = members
                    .into_iter()
                    .filter(|m| {
                        parse_rest_key(&self.ns, m)
                            .is_some_and(|(kind, name)| kind == RestKind::Route && name == key)
                    })
                    .collect();
                let own = RestScope::Route {
                    pool: None,
                    route_key: key.to_string(),
                };
                targets.extend(rest_key(&self.ns, &own).filter(|k| !targets.contains(k)));
                targets
            }
            _ => Vec::new(),
        };
        if targets.is_empty() {
            return Ok(false);
        }
        let mut pipe = redis::pipe();
        for target in &targets {
            pipe.cmd("DEL").arg(target);
        }
        pipe.cmd("ZREM").arg(&index).arg(&targets).ignore();
        if scope == "pool" {
            pipe.cmd("DEL").arg(self.evidence_key(key)).ignore();
        }
        let deleted: Vec<i64> = pipe.query_async(&mut conn).await?;
        let removed = deleted.iter().any(|&n| n > 0);
        tracing::info!(scope, key, removed, "operator cleared a rest");
        Ok(removed)
    }

    /// Note `key` in the index with its expiry, and prune what has expired.
    ///
    /// The rest is already written and in force when this runs; failing here only hides it from
    /// listings until it expires, so it is logged rather than reported as a failed write.
    async fn index(&self, key: &str, remaining_ms: u64, now_ms: i64) {
        let index = self.index_key();
        let expiry = now_ms.saturating_add_unsigned(remaining_ms);
        let mut conn = self.conn.clone();
        let indexed: Result<(), RedisError> = redis::pipe()
            .cmd("ZADD")
            .arg(&index)
            .arg("GT")
            .arg(expiry)
            .arg(key)
            .ignore()
            .cmd("ZREMRANGEBYSCORE")
            .arg(&index)
            .arg("-inf")
            .arg(format!("({now_ms}"))
            .ignore()
            .cmd("PEXPIRE")
            .arg(&index)
            .arg(INDEX_TTL_MS)
            .ignore()
            .query_async(&mut conn)
            .await;
        if let Err(error) = indexed {
            tracing::warn!(key, %error, "a rest is in force but missing from the rest index");
        }
    }

    /// PTTL and value of each key in one pipeline: `(remaining ms, reason)` for a key that rests.
    /// A key without a TTL is not a rest this module wrote, and is ignored.
    async fn read_rests(&self, keys: &[String]) -> Result<Vec<Option<(u64, String)>>, RestError> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let mut pipe = redis::pipe();
        for key in keys {
            pipe.cmd("PTTL").arg(key).cmd("GET").arg(key);
        }
        let mut conn = self.conn.clone();
        let replies: Vec<Value> = pipe.query_async(&mut conn).await?;
        if replies.len() != keys.len() * 2 {
            return Err(unexpected("a PTTL and a GET per key"));
        }
        replies
            .chunks_exact(2)
            .map(|pair| match pair {
                [Value::Int(pttl), value] if *pttl > 0 => {
                    Ok(Some((*pttl as u64, reason_of(value))))
                }
                [Value::Int(_), _] => Ok(None),
                _ => Err(unexpected("PTTL to answer an integer")),
            })
            .collect()
    }
}

/// See the module's key layout.
fn rest_key(ns: &str, scope: &RestScope) -> Option<String> {
    match scope {
        RestScope::Pool(pool) => Some(pool_key(ns, pool)),
        RestScope::Route {
            pool: Some(pool),
            route_key,
        } => Some(format!("{ns}:{{{pool}}}:route:{route_key}")),
        RestScope::Route {
            pool: None,
            route_key,
        } => Some(format!("{ns}:{{route:{route_key}}}:rest")),
        RestScope::Connection(id) => Some(circuit_key(ns, id)),
        RestScope::None => None,
    }
}

fn pool_key(ns: &str, pool: &str) -> String {
    format!("{ns}:{{{pool}}}:rest")
}

fn circuit_key(ns: &str, connection: &str) -> String {
    format!("{ns}:{{{connection}}}:circuit")
}

/// The scope kind and the listed key (`pool`, route key, connection id) of a rest key.
fn parse_rest_key(ns: &str, key: &str) -> Option<(RestKind, String)> {
    let rest = key.strip_prefix(ns)?.strip_prefix(":{")?;
    if let Some(route_key) = rest
        .strip_prefix("route:")
        .and_then(|r| r.strip_suffix("}:rest"))
    {
        return Some((RestKind::Route, route_key.to_string()));
    }
    if let Some(connection) = rest.strip_suffix("}:circuit") {
        return Some((RestKind::Circuit, connection.to_string()));
    }
    let (pool, tail) = rest.split_once('}')?;
    if tail == ":rest" {
        return Some((RestKind::Pool, pool.to_string()));
    }
    tail.strip_prefix(":route:")
        .map(|route_key| (RestKind::Route, route_key.to_string()))
}

fn non_negative(ms: i64) -> u64 {
    u64::try_from(ms).unwrap_or(0)
}

/// The `reason` of a stored rest value; a value that is not ours reads as empty.
fn reason_of(value: &Value) -> String {
    let Value::BulkString(bytes) = value else {
        return String::new();
    };
    serde_json::from_slice::<serde_json::Value>(bytes)
        .ok()
        .and_then(|v| v.get("reason").and_then(|r| r.as_str()).map(str::to_string))
        .unwrap_or_default()
}

fn unexpected(what: &'static str) -> RestError {
    RestError(RedisError::from((ErrorKind::UnexpectedReturnType, what)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_listed_key_parses_back_to_its_scope() {
        let cases = [
            (
                RestScope::Pool("openrouter-free".into()),
                RestKind::Pool,
                "openrouter-free",
            ),
            (
                RestScope::Route {
                    pool: Some("openrouter-free".into()),
                    route_key: "platform:openrouter/a/b:free".into(),
                },
                RestKind::Route,
                "platform:openrouter/a/b:free",
            ),
            (
                RestScope::Route {
                    pool: None,
                    route_key: "conn:conn_1/x:free".into(),
                },
                RestKind::Route,
                "conn:conn_1/x:free",
            ),
            (
                RestScope::Connection("platform:openrouter".into()),
                RestKind::Circuit,
                "platform:openrouter",
            ),
            (
                RestScope::Connection("conn:a.b:c".into()),
                RestKind::Circuit,
                "conn:a.b:c",
            ),
        ];
        for (scope, kind, name) in cases {
            let key = rest_key("freeway", &scope).expect("a rest scope has a key");
            assert_eq!(
                parse_rest_key("freeway", &key),
                Some((kind, name.to_string())),
                "{key}"
            );
        }
        assert_eq!(
            rest_key("freeway", &RestScope::Pool("openrouter-free".into())).as_deref(),
            Some("freeway:{openrouter-free}:rest")
        );
        assert_eq!(
            parse_rest_key("freeway", "freeway:{openrouter-free}:evidence"),
            None
        );
        assert_eq!(
            parse_rest_key("other", "freeway:{openrouter-free}:rest"),
            None
        );
    }
}
