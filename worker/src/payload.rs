//! Reading a queue entry's bytes without ever failing the consumer.
//!
//! apalis decodes an entry before the handler sees it, and a decode error is an error of the
//! worker's stream: the worker dies, the entry stays where it was, and after a restart the same
//! bytes kill it again, stranding every valid run behind them. So this codec never fails: bytes
//! that are not JSON (or nest deeper than serde_json reads) come out as a
//! marker that the handler dead-letters `invalid_job` with the reason, like any bad job.

use apalis_core::backend::codec::Codec;
use serde_json::Value;

/// The key of the object an undecodable entry becomes; no job has it (jobs deny unknown keys).
const MARKER: &str = "__freeway_undecodable";
/// How much of the decode error the dead-letter reason keeps.
const REASON_MAX: usize = 200;

/// JSON for valid entries, a marker value for the rest.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct LenientJson;

impl Codec<Value> for LenientJson {
    type Error = serde_json::Error;
    type Compact = Vec<u8>;

    fn encode(&self, value: &Value) -> Result<Vec<u8>, serde_json::Error> {
        serde_json::to_vec(value)
    }

    fn decode(&self, bytes: &Vec<u8>) -> Result<Value, serde_json::Error> {
        Ok(serde_json::from_slice(bytes).unwrap_or_else(|e| {
            let mut reason = format!("undecodable entry of {} bytes: {e}", bytes.len());
            reason.truncate(reason.floor_char_boundary(REASON_MAX));
            serde_json::json!({ MARKER: reason })
        }))
    }
}

/// Why an entry could not be decoded, when `payload` is the marker [`LenientJson`] made.
pub(crate) fn undecodable(payload: &Value) -> Option<&str> {
    payload.get(MARKER)?.as_str()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_bytes_decode_and_only_bad_ones_are_marked() {
        let codec = LenientJson;
        let good = codec.decode(&br#"{"v":1}"#.to_vec()).unwrap();
        assert_eq!(undecodable(&good), None);
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        for bad in [b"\xff\xfe not json".to_vec(), deep.into_bytes(), Vec::new()] {
            let value = codec.decode(&bad).unwrap();
            let reason = undecodable(&value).expect("marked");
            assert!(reason.starts_with("undecodable entry"), "{reason}");
            assert!(reason.len() <= REASON_MAX);
        }
    }
}
