//! Identifiers in the formats real responses use: `gen-<secs>-<20 alnum>`, `call_…`, `user_…`,
//! Groq's `org_…`, and the UUID inside high-demand messages.
//!
//! Unique ids come from a counter mixed by splitmix64 (cheap, lock-free, no RNG state); ids that
//! belong to an account (`user_id`, `org_…`) are a hash of the key, so the same key always maps to
//! the same account, as on the real service.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

const ALNUM: &[u8; 62] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
const LOWER_ALNUM: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";

static SEQUENCE: AtomicU64 = AtomicU64::new(0);

fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn process_seed() -> u64 {
    static SEED: OnceLock<u64> = OnceLock::new();
    // Seeded per process so ids differ between runs of the binary.
    *SEED.get_or_init(|| {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
    })
}

/// A stream of pseudo-random words, either unique (`unique()`) or derived from a string.
struct Words(u64);

impl Words {
    fn unique() -> Words {
        Words(process_seed() ^ SEQUENCE.fetch_add(1, Ordering::Relaxed).rotate_left(32))
    }

    fn derived(s: &str) -> Words {
        // FNV-1a: stable across runs and platforms, unlike std's randomly keyed hasher.
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in s.bytes() {
            h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
        Words(h)
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(1);
        splitmix64(self.0)
    }

    fn push_chars(&mut self, out: &mut String, alphabet: &[u8], n: usize) {
        let mut word = self.next();
        for i in 0..n {
            // 10 base-62 digits fit in 64 bits; draw a fresh word before running out.
            if i > 0 && i % 10 == 0 {
                word = self.next();
            }
            let base = alphabet.len() as u64;
            out.push(char::from(alphabet[(word % base) as usize]));
            word /= base;
        }
    }
}

/// `gen-<unix-secs>-<20 alnum>` (docs/providers.md §1.2).
pub(crate) fn generation_id(now_ms: u64) -> String {
    let mut s = format!("gen-{}-", now_ms / 1000);
    Words::unique().push_chars(&mut s, ALNUM, 20);
    s
}

/// `call_<24 alnum>`.
pub(crate) fn tool_call_id() -> String {
    let mut s = String::from("call_");
    Words::unique().push_chars(&mut s, ALNUM, 24);
    s
}

/// The thought signature Gemini attaches to the first call of a turn: opaque base64 to clients,
/// derived here from the call's id so the simulator can check it comes back without keeping
/// state (docs/providers.md §5.2).
pub(crate) fn thought_signature(call_id: &str) -> String {
    const BASE64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut s = String::from("CtACAdHt");
    Words::derived(call_id).push_chars(&mut s, BASE64, 40);
    s
}

/// The OpenRouter user owning `key` (`user_` + 27 alnum).
pub(crate) fn user_id(key: &str) -> String {
    let mut s = String::from("user_");
    Words::derived(key).push_chars(&mut s, ALNUM, 27);
    s
}

/// The Groq organization owning `key` (`org_` + 26 lowercase alnum).
pub(crate) fn org_id(key: &str) -> String {
    let mut s = String::from("org_");
    Words::derived(key).push_chars(&mut s, LOWER_ALNUM, 26);
    s
}

/// A UUID-formatted id stable for `seed` (the per-model limiter id in high-demand messages).
pub(crate) fn uuid_for(seed: &str) -> String {
    let mut w = Words::derived(seed);
    let hex = format!("{:016x}{:016x}", w.next(), w.next());
    format!(
        "{}-{}-4{}-a{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[13..16],
        &hex[17..20],
        &hex[20..32]
    )
}
