//! Signed links to one run's events (docs/api.md, `events_url`): a web app hands its user's
//! browser a URL that opens that run's event stream without the API token, and nothing else.
//!
//! The token is `{expiry_s}.{mac}`, the MAC an HMAC-SHA256 of the run id and the expiry under a
//! key derived from `FREEWAY_SECRET_KEY` for this purpose alone (so it is never the key that
//! seals connections). A token opens only the run it was made for, and only until it expires:
//! when the run's events do (a day after its deadline, the latest it can end).

use crate::store::SecretKey;
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// Signs and checks events tokens.
#[derive(Clone)]
pub struct EventsSigner {
    key: [u8; 32],
}

/// Why a token does not open a run's events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    #[error("the events token is not one freeway signed for this run")]
    Invalid,
    #[error("the events token has expired")]
    Expired,
}

impl EventsSigner {
    pub fn new(secret: &SecretKey) -> EventsSigner {
        let mut derive = mac(secret.bytes());
        derive.update(b"freeway events_url v1");
        let mut key = [0u8; 32];
        key.copy_from_slice(&derive.finalize().into_bytes());
        EventsSigner { key }
    }

    /// A token for `run_id`'s events until `expires_ms` (epoch ms, rounded up to a second).
    pub fn sign(&self, run_id: &str, expires_ms: u64) -> String {
        let expires_s = expires_ms.div_ceil(1000);
        let tag = self.tag(run_id, expires_s);
        format!("{expires_s}.{}", URL_SAFE_NO_PAD.encode(tag))
    }

    /// Whether `token` opens `run_id`'s events at `now_ms`.
    pub fn verify(&self, run_id: &str, token: &str, now_ms: u64) -> Result<(), TokenError> {
        let (expires, tag) = token.split_once('.').ok_or(TokenError::Invalid)?;
        let expires_s: u64 = expires.parse().map_err(|_| TokenError::Invalid)?;
        let tag = URL_SAFE_NO_PAD
            .decode(tag)
            .map_err(|_| TokenError::Invalid)?;
        let mut check = mac(&self.key);
        check.update(&message(run_id, expires_s));
        check.verify_slice(&tag).map_err(|_| TokenError::Invalid)?;
        if now_ms / 1000 >= expires_s {
            return Err(TokenError::Expired);
        }
        Ok(())
    }

    fn tag(&self, run_id: &str, expires_s: u64) -> Vec<u8> {
        let mut m = mac(&self.key);
        m.update(&message(run_id, expires_s));
        m.finalize().into_bytes().to_vec()
    }
}

/// HMAC-SHA256 under a 32-byte key. HMAC pads a key shorter than SHA-256's 64-byte block with
/// zeros, so the padded key is the same key, and no length can be wrong.
fn mac(key: &[u8; 32]) -> HmacSha256 {
    let mut block = [0u8; 64];
    block[..32].copy_from_slice(key);
    <HmacSha256 as KeyInit>::new(&block.into())
}

/// What is signed: the run and the expiry, length-prefixed so no pair reads as another.
fn message(run_id: &str, expires_s: u64) -> Vec<u8> {
    let mut m = Vec::with_capacity(run_id.len() + 24);
    m.extend_from_slice(&(run_id.len() as u64).to_be_bytes());
    m.extend_from_slice(run_id.as_bytes());
    m.extend_from_slice(&expires_s.to_be_bytes());
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY_A: &str = "8ee174dcf8ad329ae979bb069827ff9c724d65abccc3922da06977d036e0ee0b";
    const KEY_B: &str = "7855f434365d6cfb09ece647b3f34236916226fd31fa35467a10c7fab4832a32";

    fn signer(hex: &str) -> EventsSigner {
        EventsSigner::new(&SecretKey::from_hex(hex).unwrap())
    }

    #[test]
    fn a_token_opens_its_run_until_it_expires_and_nothing_else() {
        let s = signer(KEY_A);
        let token = s.sign("run_a", 10_000);
        assert_eq!(s.verify("run_a", &token, 9_000), Ok(()));
        assert_eq!(s.verify("run_a", &token, 10_000), Err(TokenError::Expired));
        assert_eq!(s.verify("run_b", &token, 9_000), Err(TokenError::Invalid));
        assert_eq!(
            signer(KEY_B).verify("run_a", &token, 9_000),
            Err(TokenError::Invalid)
        );
        let later = token.replacen("10.", "99999.", 1);
        assert_eq!(
            s.verify("run_a", &later, 9_000),
            Err(TokenError::Invalid),
            "{later}"
        );
        for junk in ["", ".", "x.y", "10", "10.%%%", "-1.AAAA"] {
            assert_eq!(
                s.verify("run_a", junk, 0),
                Err(TokenError::Invalid),
                "{junk:?}"
            );
        }
    }
}
