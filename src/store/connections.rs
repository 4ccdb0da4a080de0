//! Users' own provider keys (docs/design.md §1 "connection", docs/api.md §1 `PUT
//! /v1/connections/{id}`): stored sealed, opened only at call time.
//!
//! A job names only the connection id; [`StoreTargets`] reads the row when a call is about to be
//! made and opens the key with `FREEWAY_SECRET_KEY`, so the plain key exists only in the worker's
//! memory for that call, never in a job, an event, Redis, a log line or the database.
//!
//! Sealing is XChaCha20-Poly1305 (RustCrypto's `chacha20poly1305`) with a random 24-byte nonce
//! per write. The row's id, user and provider are the associated data, so a sealed key copied onto
//! another row does not open. Stored form: `v1:` + base64(nonce ‖ ciphertext ‖ tag).
//!
//! Rotating `FREEWAY_SECRET_KEY`: give every process the new key, and the old one as
//! `FREEWAY_SECRET_KEY_PREVIOUS` ([`SecretKeys`]: keys sealed with it still open), run
//! `worker reseal-keys` ([`SqlStore::reseal_connections`]), then drop the previous key.

use super::sql::db::{db_error, now_ms, on_db};
use super::sql::{Columns, SqlStore};
use super::{ConnectionInfo, StoreError};
use crate::catalog::Catalog;
use crate::provider::{ApiKey, EnvTargets, Target, TargetError, Targets};
use crate::route::{Connection, Route};
use async_trait::async_trait;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use chacha20poly1305::aead::{Aead, Generate, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use std::fmt;

const SEAL_VERSION: &str = "v1:";
const NONCE_LEN: usize = 24;
/// Longer than any provider's key; a bound so a request cannot store megabytes.
const MAX_KEY_BYTES: usize = 4096;

/// Fewer different byte values than this and a key is refused as weak. 32 random bytes hold
/// about 30 different values; 7 or fewer come up by chance with odds below 1 in 10^36, while a
/// key typed by hand (`00ff00ff…`, a word repeated) has a handful.
const MIN_DISTINCT_BYTES: usize = 8;
/// A key that is a pattern of this many bytes or fewer, repeated, is refused as weak: it holds at
/// most half a key's worth of secret, and random bytes repeat so with odds below 1 in 10^38.
const MAX_PATTERN_BYTES: usize = 16;

/// `FREEWAY_SECRET_KEY`: 32 bytes written as 64 hex characters (`openssl rand -hex 32`), not
/// trivially weak ([`SecretKeyError::Weak`]). It never prints.
#[derive(Clone)]
pub struct SecretKey([u8; 32]);

/// Why a `FREEWAY_SECRET_KEY` was refused; never shows the key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecretKeyError {
    #[error(
        "must be 32 bytes written as 64 hex characters (generate one with `openssl rand -hex 32`), got {0}"
    )]
    Malformed(String),
    /// A key anyone could guess: all one byte (all zero included), a short pattern repeated, a
    /// counting sequence, or a few byte values.
    #[error("is too weak: {0} (generate one with `openssl rand -hex 32`)")]
    Weak(&'static str),
}

impl SecretKey {
    /// The key's bytes, for deriving keys of other purposes from it.
    pub(crate) fn bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// `FREEWAY_SECRET_KEY`: well-formed and not trivially weak.
    pub fn from_hex(text: &str) -> Result<SecretKey, SecretKeyError> {
        let key = Self::from_hex_retiring(text)?;
        match weakness(&key.0) {
            Some(why) => Err(SecretKeyError::Weak(why)),
            None => Ok(key),
        }
    }

    /// `FREEWAY_SECRET_KEY_PREVIOUS`, a key being rotated out: only well-formed, as a weak key is
    /// got rid of by exactly that rotation (its connections must still open to be resealed).
    pub fn from_hex_retiring(text: &str) -> Result<SecretKey, SecretKeyError> {
        let text = text.trim();
        if text.len() != 64 {
            return Err(SecretKeyError::Malformed(format!(
                "{} characters",
                text.len()
            )));
        }
        let mut bytes = [0u8; 32];
        for (byte, pair) in bytes.iter_mut().zip(text.as_bytes().chunks(2)) {
            let digits = std::str::from_utf8(pair)
                .ok()
                .and_then(|p| u8::from_str_radix(p, 16).ok());
            *byte = digits.ok_or_else(|| {
                SecretKeyError::Malformed("a character that is not a hex digit".into())
            })?;
        }
        Ok(SecretKey(bytes))
    }

    fn cipher(&self) -> XChaCha20Poly1305 {
        XChaCha20Poly1305::new(&self.0.into())
    }
}

/// Why `bytes` would be a key anyone could guess, if it would.
fn weakness(bytes: &[u8; 32]) -> Option<&'static str> {
    if bytes.iter().all(|&b| b == bytes[0]) {
        return Some("all its bytes are the same");
    }
    let repeats = |period: usize| bytes.iter().zip(&bytes[period..]).all(|(a, b)| a == b);
    if (2..=MAX_PATTERN_BYTES).any(repeats) {
        return Some("it repeats a pattern of 16 bytes or fewer");
    }
    let step = bytes[1].wrapping_sub(bytes[0]);
    if bytes.windows(2).all(|w| w[1].wrapping_sub(w[0]) == step) {
        return Some("its bytes count up or down in equal steps");
    }
    let mut seen = [false; 256];
    bytes.iter().for_each(|&b| seen[usize::from(b)] = true);
    if seen.iter().filter(|&&s| s).count() < MIN_DISTINCT_BYTES {
        return Some("it has fewer than 8 different byte values");
    }
    None
}

impl fmt::Debug for SecretKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SecretKey(***)")
    }
}

/// What the associated data binds a sealed key to.
fn aad(id: &str, user_id: &str, provider: &str) -> Vec<u8> {
    format!("freeway-connection\0{id}\0{user_id}\0{provider}").into_bytes()
}

fn seal(secret: &SecretKey, api_key: &ApiKey, aad: &[u8]) -> Result<String, StoreError> {
    let nonce = XNonce::try_generate()
        .map_err(|e| StoreError::Unavailable(format!("no randomness for a nonce: {e}")))?;
    let sealed = secret
        .cipher()
        .encrypt(
            &nonce,
            Payload {
                msg: api_key.expose().as_bytes(),
                aad,
            },
        )
        .map_err(|_| StoreError::Invalid("the key cannot be sealed".into()))?;
    let mut bytes = nonce.to_vec();
    bytes.extend_from_slice(&sealed);
    Ok(format!("{SEAL_VERSION}{}", BASE64.encode(bytes)))
}

fn open(secret: &SecretKey, id: &str, sealed: &str, aad: &[u8]) -> Result<ApiKey, StoreError> {
    let undecryptable = || StoreError::Undecryptable(id.to_string());
    let bytes = sealed
        .strip_prefix(SEAL_VERSION)
        .and_then(|b| BASE64.decode(b).ok())
        .ok_or_else(undecryptable)?;
    if bytes.len() < NONCE_LEN {
        return Err(undecryptable());
    }
    let (nonce, ciphertext) = bytes.split_at(NONCE_LEN);
    let nonce = XNonce::try_from(nonce).map_err(|_| undecryptable())?;
    let plain = secret
        .cipher()
        .decrypt(
            &nonce,
            Payload {
                msg: ciphertext,
                aad,
            },
        )
        .map_err(|_| undecryptable())?;
    String::from_utf8(plain)
        .map(ApiKey::new)
        .map_err(|_| undecryptable())
}

/// A connection to store: `PUT /v1/connections/{id}` with `{user_id, provider, api_key}`.
#[derive(Debug, Clone)]
pub struct NewConnection {
    pub id: String,
    pub user_id: String,
    pub provider: String,
    pub api_key: ApiKey,
}

/// The key that seals, and the one being retired, which still opens what it sealed.
#[derive(Clone, Debug)]
pub struct SecretKeys {
    pub current: SecretKey,
    pub previous: Option<SecretKey>,
}

impl SecretKeys {
    /// Open with the current key, else with the previous one.
    fn open(&self, id: &str, sealed: &str, aad: &[u8]) -> Result<ApiKey, StoreError> {
        open(&self.current, id, sealed, aad).or_else(|e| match &self.previous {
            Some(previous) => open(previous, id, sealed, aad),
            None => Err(e),
        })
    }
}

/// What [`SqlStore::reseal_connections`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Resealed {
    /// Keys that were sealed with the previous key and now are with the current one.
    pub resealed: u64,
    /// Keys already sealed with the current key.
    pub current: u64,
    /// Connections whose key opens with neither key: left as they are.
    pub unreadable: Vec<String>,
}

impl NewConnection {
    fn validate(&self, catalog: &Catalog) -> Result<(), StoreError> {
        let invalid = |m: &str| Err(StoreError::Invalid(m.to_string()));
        if !matches!(Connection::parse(&self.id), Ok(Connection::User(_)))
            || catalog.is_reserved_connection_id(&self.id)
        {
            return invalid(
                "connection id must be 1-128 characters of [A-Za-z0-9_.:-], and neither \"platform\" nor a provider's name",
            );
        }
        if !is_id(&self.user_id) {
            return invalid("user_id must match [A-Za-z0-9_.:-]{1,128}");
        }
        if catalog.provider(&self.provider).is_none() {
            return invalid(&format!(
                "provider must be a configured provider ({})",
                catalog.provider_names()
            ));
        }
        let key = self.api_key.expose();
        if key.trim().is_empty() || key.len() > MAX_KEY_BYTES || key.chars().any(char::is_control) {
            return invalid("api_key must be 1-4096 printable characters");
        }
        Ok(())
    }
}

fn is_id(s: &str) -> bool {
    (1..=128).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b':' | b'-'))
}

fn info_from(row: &impl Columns) -> Result<ConnectionInfo, StoreError> {
    let ms = |col: &str| -> Result<u64, StoreError> {
        u64::try_from(row.int(col)?).map_err(|_| StoreError::Corrupt(format!("{col} is negative")))
    };
    Ok(ConnectionInfo {
        id: row.text("id")?,
        user_id: row.text("user_id")?,
        provider: row.text("provider")?,
        created_ms: ms("created_ms")?,
        updated_ms: ms("updated_ms")?,
    })
}

impl SqlStore {
    /// Store (or replace) a user's connection, its key sealed with `secret`; its provider must be
    /// one `catalog` configures. An id that belongs to another user is a
    /// [`StoreError::Conflict`].
    pub async fn put_connection(
        &self,
        secret: &SecretKey,
        c: &NewConnection,
        catalog: &Catalog,
    ) -> Result<(), StoreError> {
        const SQL: &str = "INSERT INTO connections (id, user_id, provider, sealed_key, created_ms, updated_ms) \
             VALUES ($1, $2, $3, $4, $5, $5) ON CONFLICT (id) DO UPDATE SET provider = excluded.provider, \
             sealed_key = excluded.sealed_key, updated_ms = excluded.updated_ms \
             WHERE connections.user_id = excluded.user_id";
        c.validate(catalog)?;
        let sealed = seal(secret, &c.api_key, &aad(&c.id, &c.user_id, &c.provider))?;
        let now = now_ms()?;
        let written = on_db!(self, |pool| {
            sqlx::query(SQL)
                .bind(&c.id)
                .bind(&c.user_id)
                .bind(&c.provider)
                .bind(&sealed)
                .bind(now)
                .execute(pool)
                .await
                .map_err(db_error)?
                .rows_affected()
        });
        if written == 0 {
            return Err(StoreError::Conflict(format!(
                "connection {:?} belongs to another user",
                c.id
            )));
        }
        Ok(())
    }

    /// Remove a user's connection; `false` when that user has no connection of that id.
    pub async fn delete_connection(&self, user_id: &str, id: &str) -> Result<bool, StoreError> {
        const SQL: &str = "DELETE FROM connections WHERE id = $1 AND user_id = $2";
        let deleted = on_db!(self, |pool| {
            sqlx::query(SQL)
                .bind(id)
                .bind(user_id)
                .execute(pool)
                .await
                .map_err(db_error)?
                .rows_affected()
        });
        Ok(deleted > 0)
    }

    /// A connection and its opened key: for the call about to be made, nothing else.
    pub async fn connection_key(
        &self,
        keys: &SecretKeys,
        id: &str,
    ) -> Result<Option<(ConnectionInfo, ApiKey)>, StoreError> {
        let Some((info, sealed)) = self.sealed_connection(id).await? else {
            return Ok(None);
        };
        let key = keys.open(id, &sealed, &aad(&info.id, &info.user_id, &info.provider))?;
        Ok(Some((info, key)))
    }

    /// Seal every key that opens only with the previous key with the current one. A row changed
    /// meanwhile (a new key put) is left to its writer.
    pub async fn reseal_connections(&self, keys: &SecretKeys) -> Result<Resealed, StoreError> {
        const ALL: &str = "SELECT id, user_id, provider, sealed_key FROM connections ORDER BY id";
        const RESEAL: &str = "UPDATE connections SET sealed_key = $2, updated_ms = $3 \
             WHERE id = $1 AND sealed_key = $4";
        let rows: Vec<[String; 4]> = on_db!(self, |pool| {
            sqlx::query(ALL)
                .fetch_all(pool)
                .await
                .map_err(db_error)?
                .iter()
                .map(|r| {
                    Ok([
                        r.text("id")?,
                        r.text("user_id")?,
                        r.text("provider")?,
                        r.text("sealed_key")?,
                    ])
                })
                .collect::<Result<_, StoreError>>()?
        });
        let mut done = Resealed::default();
        for [id, user_id, provider, sealed] in rows {
            let aad = aad(&id, &user_id, &provider);
            if open(&keys.current, &id, &sealed, &aad).is_ok() {
                done.current += 1;
                continue;
            }
            let previous = keys.previous.as_ref();
            let Some(key) = previous.and_then(|p| open(p, &id, &sealed, &aad).ok()) else {
                done.unreadable.push(id);
                continue;
            };
            let resealed = seal(&keys.current, &key, &aad)?;
            let now = now_ms()?;
            let changed = on_db!(self, |pool| {
                sqlx::query(RESEAL)
                    .bind(&id)
                    .bind(&resealed)
                    .bind(now)
                    .bind(&sealed)
                    .execute(pool)
                    .await
                    .map_err(db_error)?
                    .rows_affected()
            });
            done.resealed += changed;
        }
        Ok(done)
    }

    pub(super) async fn sealed_connection(
        &self,
        id: &str,
    ) -> Result<Option<(ConnectionInfo, String)>, StoreError> {
        const SQL: &str = "SELECT id, user_id, provider, sealed_key, created_ms, updated_ms \
             FROM connections WHERE id = $1";
        on_db!(self, |pool| {
            match sqlx::query(SQL)
                .bind(id)
                .fetch_optional(pool)
                .await
                .map_err(db_error)?
            {
                Some(row) => Ok(Some((info_from(&row)?, row.text("sealed_key")?))),
                None => Ok(None),
            }
        })
    }
}

/// [`Targets`] for a worker: the platform connection from the environment ([`EnvTargets`]) and
/// users' connections from the store, their keys opened at call time.
pub struct StoreTargets {
    env: EnvTargets,
    store: SqlStore,
    keys: Option<SecretKeys>,
}

impl StoreTargets {
    pub fn new(env: EnvTargets, store: SqlStore, keys: Option<SecretKeys>) -> StoreTargets {
        StoreTargets { env, store, keys }
    }
}

#[async_trait]
impl Targets for StoreTargets {
    async fn target(&self, route: &Route, user_id: &str) -> Result<Target, TargetError> {
        let Connection::User(id) = &route.connection else {
            return self.env.target(route, user_id).await;
        };
        let base_url = self
            .env
            .base_url(&route.provider)
            .ok_or_else(|| TargetError::UnknownProvider(route.provider.clone()))?;
        let unknown = || TargetError::UnknownConnection(id.clone());
        // An outage is not the connection's fault: the engine hands it to the queue to retry
        // instead of failing the call. The cause never carries the key.
        let Some(keys) = &self.keys else {
            return Err(TargetError::Unavailable(
                StoreError::NoSecretKey.to_string(),
            ));
        };
        let (info, api_key) = match self.store.connection_key(keys, id).await {
            Ok(Some(found)) => found,
            Ok(None) => return Err(unknown()),
            Err(e) => {
                return Err(TargetError::Unavailable(format!(
                    "cannot read connection {id}: {e}"
                )));
            }
        };
        // Checked at enqueue too; checked again here because a queue entry is no proof of it, and
        // a connection can change hands (deleted, then stored by another user) in between.
        if info.user_id != user_id {
            tracing::warn!(connection = %id, user_id, "the connection belongs to another user");
            return Err(unknown());
        }
        if info.provider != route.provider {
            tracing::warn!(
                connection = %id,
                provider = %info.provider,
                route = %route,
                "the connection is for another provider"
            );
            return Err(unknown());
        }
        Ok(Target { base_url, api_key })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEX: &str = "11605003375cd3a9b2cc226f6e160dceb97748b36bb16e834a843c9bb5a54a73";

    #[test]
    fn the_secret_key_is_64_hex_characters_and_never_prints() {
        let key = SecretKey::from_hex(HEX).unwrap();
        assert_eq!(format!("{key:?}"), "SecretKey(***)");
        assert!(SecretKey::from_hex("abc").is_err());
        let bad = SecretKey::from_hex(&HEX.replace('0', "g")).unwrap_err();
        assert!(
            !bad.to_string().contains("g1"),
            "the error does not echo the value: {bad}"
        );
    }

    #[test]
    fn a_trivially_weak_key_is_refused_without_echoing_it() {
        let weak = [
            ("00".repeat(32), "all its bytes are the same"),
            ("ab".repeat(32), "all its bytes are the same"),
            ("deadbeef".repeat(8), "repeats a pattern"),
            (
                "00112233445566778899aabbccddeeff".repeat(2),
                "repeats a pattern",
            ),
            ((0..32u8).map(|b| format!("{b:02x}")).collect(), "count up"),
            (
                (0..32u8).map(|b| format!("{:02x}", 255 - 3 * b)).collect(),
                "count up",
            ),
            (format!("{}{}", "00".repeat(30), "0102"), "fewer than 8"),
        ];
        for (hex, why) in weak {
            let e = SecretKey::from_hex(&hex).unwrap_err();
            assert!(matches!(e, SecretKeyError::Weak(_)), "{hex}: {e}");
            let shown = e.to_string();
            assert!(shown.contains(why), "{hex}: {shown}");
            assert!(!shown.contains(&hex[..8]), "no echo: {shown}");
        }
        assert!(SecretKey::from_hex(HEX).is_ok());
        assert!(SecretKey::from_hex_retiring(&"00".repeat(32)).is_ok());
        assert!(SecretKey::from_hex_retiring("abc").is_err());
    }

    #[test]
    fn a_sealed_key_opens_only_on_its_own_row() {
        let secret = SecretKey::from_hex(HEX).unwrap();
        let key = ApiKey::new("sk-user-raw-key");
        let sealed = seal(&secret, &key, &aad("conn_1", "u1", "openrouter")).unwrap();
        assert!(sealed.starts_with("v1:") && !sealed.contains("sk-user-raw-key"));
        let opened = open(
            &secret,
            "conn_1",
            &sealed,
            &aad("conn_1", "u1", "openrouter"),
        )
        .unwrap();
        assert_eq!(opened.expose(), "sk-user-raw-key");
        assert!(
            open(
                &secret,
                "conn_2",
                &sealed,
                &aad("conn_2", "u1", "openrouter")
            )
            .is_err()
        );
        assert!(
            open(
                &secret,
                "conn_1",
                &sealed,
                &aad("conn_1", "u2", "openrouter")
            )
            .is_err()
        );
        let other = SecretKey::from_hex(&HEX.replace('0', "f")).unwrap();
        assert!(matches!(
            open(
                &other,
                "conn_1",
                &sealed,
                &aad("conn_1", "u1", "openrouter")
            ),
            Err(StoreError::Undecryptable(_))
        ));
        assert!(
            open(
                &secret,
                "conn_1",
                "v1:short",
                &aad("conn_1", "u1", "openrouter")
            )
            .is_err()
        );
    }

    #[test]
    fn two_seals_of_one_key_differ() {
        let secret = SecretKey::from_hex(HEX).unwrap();
        let key = ApiKey::new("sk-user-raw-key");
        let aad = aad("conn_1", "u1", "openrouter");
        assert_ne!(
            seal(&secret, &key, &aad).unwrap(),
            seal(&secret, &key, &aad).unwrap()
        );
    }
}
