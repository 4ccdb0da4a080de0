//! The rests every replica shares, in Redis: [`RedisRests`].
//!
//! A rest must hold for every replica at once and survive any of them, so it lives in Redis as a
//! key whose TTL is the rest. Every write is a Lua script that only extends (the new expiry is the
//! longer of the current and the requested one, clamped to [1 s, cap]) with the time taken from
//! Redis `TIME`, so concurrent writers keep the longest rest and replicas' clocks never matter.
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
//! | `{ns:unnamed}:all` | ZSET | rests of routes no configuration names: member = `<user_id> <rest key>`, score = expiry |
//! | `{ns:unnamed}:user:<user_id>` | ZSET | the same, of one user's runs: member = rest key |
//! | `{ns:unnamed}:dropped` | counter | such rests dropped to keep them within their bounds |
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

use super::{
    ActiveRest, Closure, EVIDENCE_REASON, FleetError, GUESS_MEMORY_MS, PROBE_MS, PROBING_REASON,
    Probe, RestKind, Rests, UNNAMED_RESTS, UNNAMED_RESTS_PER_USER, evidence_member, longest,
    probing, scopes_closing, sort_listing,
};
use crate::classify::{
    EVIDENCE_MIN_ENTRIES, EVIDENCE_MIN_USERS, EVIDENCE_POOL_REST_MS, EVIDENCE_WINDOW_MS,
    LONG_REST_CAP_MS, MIN_REST_MS, POOL_REST_CAP_MS, RestLength, RestScope,
};
use crate::connect::{RedisConnection, keyed};
use crate::route::Route;
use async_trait::async_trait;
use redis::{AsyncCommands, Cmd, ErrorKind, RedisError, Script, Value};
use std::collections::HashMap;
use std::sync::LazyLock;

static WRITE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("extend.lua"),
        include_str!("write.lua")
    ))
});
static BOUND: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("extend.lua"),
        include_str!("bound.lua")
    ))
});
static EVIDENCE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("extend.lua"),
        include_str!("evidence.lua")
    ))
});

/// The evidence ZSET outlives its window so a quiet pool's evidence disappears on its own.
const EVIDENCE_TTL_MS: u64 = 2 * EVIDENCE_WINDOW_MS;
/// The index outlives the longest rest it can list.
const INDEX_TTL_MS: u64 = LONG_REST_CAP_MS + 60_000;

/// The fleet's rests, in one Redis namespace.
#[derive(Clone)]
pub struct RedisRests {
    conn: RedisConnection,
    ns: String,
}

impl RedisRests {
    pub fn new(conn: RedisConnection, ns: impl Into<String>) -> Self {
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

    /// The sets that bound the rests of routes no configuration names, and their drop count,
    /// under one hash tag: `{ns:unnamed}:<what>`.
    fn unnamed_key(&self, what: &str) -> String {
        format!("{{{}:unnamed}}:{what}", self.ns)
    }

    /// Delete rests dropped to keep the bounds, with their guesses, and take them off the index.
    async fn drop_rests(&self, keys: &[String]) -> Result<(), FleetError> {
        let index = self.index_key();
        let commands = keys
            .iter()
            .flat_map(|key| {
                let mut unindex = keyed("ZREM", &index);
                unindex.arg(key);
                [keyed("DEL", key), keyed("DEL", &guess_key(key)), unindex]
            })
            .collect();
        self.conn.each::<Value>(commands).await?;
        tracing::info!(
            dropped = keys.len(),
            "rests of routes no configuration names dropped to keep their bounds"
        );
        Ok(())
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

    /// Remember past the end of the rest at `key` that its length was a guess: its end calls
    /// for a probe.
    async fn remember_guess(&self, key: &str, remaining_ms: u64) -> Result<(), FleetError> {
        let mut conn = self.conn.clone();
        let _: () = redis::cmd("SET")
            .arg(guess_key(key))
            .arg(1)
            .arg("PX")
            .arg(remaining_ms.saturating_add(GUESS_MEMORY_MS))
            .query_async(&mut conn)
            .await?;
        Ok(())
    }

    /// `(remaining ms, reason)` of each key that rests. Almost every read finds no rest, so it is
    /// an MGET a scope (its rest and its probe share a slot), and a second round trip reads the
    /// TTLs of only the keys that hold a value. A key without a TTL (gone meanwhile, or not a
    /// rest this module wrote) is ignored.
    async fn read_rests(&self, keys: &[String]) -> Result<Vec<Option<(u64, String)>>, FleetError> {
        let mut states = vec![None; keys.len()];
        if keys.is_empty() {
            return Ok(states);
        }
        let values = self.conn.values_by_slot(keys).await?;
        let held: Vec<usize> = (0..keys.len())
            .filter(|&i| !matches!(values[i], Value::Nil))
            .collect();
        if held.is_empty() {
            return Ok(states);
        }
        let pttls = held.iter().map(|&i| keyed("PTTL", &keys[i])).collect();
        let ttls: Vec<Value> = self.conn.each(pttls).await?;
        if ttls.len() != held.len() {
            return Err(unexpected("a PTTL per key"));
        }
        for (&i, ttl) in held.iter().zip(ttls) {
            match ttl {
                Value::Int(ms) if ms > 0 => states[i] = Some((ms as u64, reason_of(&values[i]))),
                Value::Int(_) => {}
                _ => return Err(unexpected("PTTL to answer an integer")),
            }
        }
        Ok(states)
    }
}

#[async_trait]
impl Rests for RedisRests {
    async fn write(
        &self,
        scope: &RestScope,
        length: RestLength,
        reason: &str,
    ) -> Result<u64, FleetError> {
        let Some(key) = self.key_for(scope) else {
            return Ok(0);
        };
        let (mode, ms) = length.mode();
        let mut conn = self.conn.clone();
        let (remaining, now): (i64, i64) = WRITE
            .key(&key)
            .arg(mode)
            .arg(ms)
            .arg(MIN_REST_MS)
            .arg(length.cap_ms(scope))
            .arg(reason)
            .invoke_async(&mut conn)
            .await?;
        let remaining = non_negative(remaining);
        self.index(&key, remaining, now).await;
        if matches!(length, RestLength::Guess(_)) {
            self.remember_guess(&key, remaining).await?;
        }
        Ok(remaining)
    }

    async fn write_unnamed(
        &self,
        scope: &RestScope,
        length: RestLength,
        reason: &str,
        user_id: &str,
    ) -> Result<u64, FleetError> {
        let remaining = self.write(scope, length, reason).await?;
        let Some(key) = self.key_for(scope) else {
            return Ok(remaining);
        };
        let user_prefix = self.unnamed_key("user:");
        let mut conn = self.conn.clone();
        let dropped: Vec<String> = BOUND
            .key(self.unnamed_key("all"))
            .key(format!("{user_prefix}{user_id}"))
            .key(self.unnamed_key("dropped"))
            .arg(user_id)
            .arg(&key)
            .arg(remaining)
            .arg(UNNAMED_RESTS_PER_USER)
            .arg(UNNAMED_RESTS)
            .arg(INDEX_TTL_MS)
            .arg(&user_prefix)
            .invoke_async(&mut conn)
            .await?;
        if !dropped.is_empty() {
            self.drop_rests(&dropped).await?;
        }
        Ok(remaining)
    }

    async fn dropped(&self) -> Result<u64, FleetError> {
        let mut conn = self.conn.clone();
        let dropped: Option<u64> = conn.get(self.unnamed_key("dropped")).await?;
        Ok(dropped.unwrap_or(0))
    }

    async fn claim_probes(&self, route: &Route, owner: &str) -> Result<Probe, FleetError> {
        let keys: Vec<String> = scopes_closing(route)
            .iter()
            .filter_map(|(_, scope)| self.key_for(scope))
            .collect();
        // A probe is due where a guessed rest has ended: its guess is remembered and its rest is
        // gone. Guesses are rare, so the rests are read only where one is remembered.
        let guesses: Vec<String> = keys.iter().map(|key| guess_key(key)).collect();
        let guessed = self.conn.values_by_slot(&guesses).await?;
        let guessed: Vec<&String> = keys
            .iter()
            .zip(guessed)
            .filter_map(|(key, guess)| (guess != Value::Nil).then_some(key))
            .collect();
        if guessed.is_empty() {
            return Ok(Probe::NotDue);
        }
        let exists = guessed.iter().map(|key| keyed("EXISTS", key)).collect();
        let resting: Vec<bool> = self.conn.each(exists).await?;
        let due: Vec<&String> = guessed
            .into_iter()
            .zip(resting)
            .filter_map(|(key, resting)| (!resting).then_some(key))
            .collect();
        if due.is_empty() {
            return Ok(Probe::NotDue);
        }
        let value = probe_value(owner);
        let mut conn = self.conn.clone();
        for key in due {
            let (held_ms, holder): (i64, Option<String>) = CLAIM
                .key(probe_key(key))
                .arg(&value)
                .arg(PROBE_MS)
                .invoke_async(&mut conn)
                .await?;
            if held_ms > 0 && holder.as_deref() != Some(value.as_str()) {
                // Probes this call claimed on other scopes stay until they lapse: short.
                return Ok(Probe::Held(probing(held_ms as u64)));
            }
        }
        Ok(Probe::Claimed)
    }

    async fn probes_answered(
        &self,
        route: &Route,
        owner: &str,
        reopened: bool,
    ) -> Result<(), FleetError> {
        let value = probe_value(owner);
        let mut conn = self.conn.clone();
        for (_, scope) in scopes_closing(route) {
            let Some(key) = self.key_for(&scope) else {
                continue;
            };
            let _: i64 = ANSWER
                .key(probe_key(&key))
                .key(guess_key(&key))
                .arg(&value)
                .arg(u8::from(reopened))
                .invoke_async(&mut conn)
                .await?;
        }
        Ok(())
    }

    async fn record_evidence(
        &self,
        pool: &str,
        user_id: &str,
        unique: &str,
    ) -> Result<Option<u64>, FleetError> {
        let member = evidence_member(user_id, unique);
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
        self.remember_guess(&rest_key, remaining).await?;
        Ok(Some(remaining))
    }

    async fn closures(&self, routes: &[Route]) -> Result<Vec<Option<Closure>>, FleetError> {
        let mut keys: Vec<String> = Vec::new();
        let mut slots: HashMap<String, usize> = HashMap::new();
        let mut slot = |key: String| -> usize {
            let next = slots.len();
            *slots.entry(key.clone()).or_insert_with(|| {
                keys.push(key);
                next
            })
        };
        // Each scope's rest, and the probe another call may hold on it.
        let candidates: Vec<Vec<(RestKind, usize, usize)>> = routes
            .iter()
            .map(|route| {
                scopes_closing(route)
                    .into_iter()
                    .filter_map(|(kind, scope)| {
                        let key = self.key_for(&scope)?;
                        Some((kind, slot(probe_key(&key)), slot(key)))
                    })
                    .collect()
            })
            .collect();
        let states = self.read_rests(&keys).await?;
        Ok(candidates
            .into_iter()
            .map(|mine| {
                let held: Vec<_> = mine
                    .into_iter()
                    .flat_map(|(kind, probe, rest)| {
                        let probe = states[probe]
                            .as_ref()
                            .map(|(ms, _)| (probing(*ms).remaining_ms, PROBING_REASON.to_string()));
                        [(kind, states[rest].clone()), (RestKind::Route, probe)]
                    })
                    .collect();
                longest(held.iter().map(|(kind, state)| (*kind, state.as_ref())))
            })
            .collect())
    }

    async fn remaining(&self, scope: &RestScope) -> Result<Option<u64>, FleetError> {
        let Some(key) = self.key_for(scope) else {
            return Ok(None);
        };
        let mut conn = self.conn.clone();
        let pttl: i64 = redis::cmd("PTTL").arg(&key).query_async(&mut conn).await?;
        Ok((pttl > 0).then_some(pttl as u64))
    }

    async fn list(&self) -> Result<Vec<ActiveRest>, FleetError> {
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
                (Some((kind, name)), Some((remaining_ms, reason))) => {
                    active.push(ActiveRest::new(kind, name, remaining_ms, reason));
                }
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
        sort_listing(&mut active);
        Ok(active)
    }

    async fn clear(&self, scope: &str, key: &str) -> Result<bool, FleetError> {
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
        let mut commands: Vec<Cmd> = targets.iter().map(|t| keyed("DEL", t)).collect();
        let mut unindex = keyed("ZREM", &index);
        unindex.arg(&targets);
        commands.push(unindex);
        if scope == "pool" {
            commands.push(keyed("DEL", &self.evidence_key(key)));
        }
        let deleted: Vec<i64> = self.conn.each(commands).await?;
        let removed = deleted[..targets.len().min(deleted.len())]
            .iter()
            .any(|&n| n > 0);
        tracing::info!(scope, key, removed, "operator cleared a rest");
        Ok(removed)
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

/// Set while a guessed rest of `rest_key` lasts, and for a while after: its end needs a probe.
fn guess_key(rest_key: &str) -> String {
    format!("{rest_key}:guess")
}

/// The probe of `rest_key`'s scope, held by one call.
fn probe_key(rest_key: &str) -> String {
    format!("{rest_key}:probe")
}

/// A probe's value: the reason listings show, and the call that holds it.
fn probe_value(owner: &str) -> String {
    serde_json::json!({ "reason": PROBING_REASON, "owner": owner }).to_string()
}

/// Claims the probe (KEYS[1]) for ARGV[1] for ARGV[2] ms; returns its remaining ms and holder.
static CLAIM: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
        redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])
        return {redis.call('PTTL', KEYS[1]), redis.call('GET', KEYS[1])}
        ",
    )
});

/// Releases the probe (KEYS[1]) if ARGV[1] holds it, forgetting the guess (KEYS[2]) when the
/// probe reopened the scope (ARGV[2] = 1).
static ANSWER: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
        if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
        redis.call('DEL', KEYS[1])
        if ARGV[2] == '1' then redis.call('DEL', KEYS[2]) end
        return 1
        ",
    )
});

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

fn unexpected(what: &'static str) -> FleetError {
    FleetError::from(RedisError::from((ErrorKind::UnexpectedReturnType, what)))
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
