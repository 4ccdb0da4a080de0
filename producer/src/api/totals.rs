//! The board's day of totals (`GET /v1/board/totals`) and the one reading of them every open
//! board shares. The cache is part of the handlers' state, so it lives here, below them.

use freeway::store::{Store, StoreError};
use serde::Serialize;

/// The span `GET /v1/board/totals` covers: the last 24 hours.
const TOTALS_SPAN_MS: u64 = 24 * 3_600_000;
/// Its buckets: ten minutes, 144 of them.
const TOTALS_BUCKET_MS: u64 = 600_000;

#[derive(Clone, Serialize, utoipa::ToSchema)]
pub struct Totals {
    /// The first bucket's start, epoch ms.
    from_ms: u64,
    bucket_ms: u64,
    buckets: u64,
    /// Each status and bucket with runs, in any order (bucket `i` starts at
    /// `from_ms + i * bucket_ms`).
    counts: Vec<freeway::store::EndedCount>,
}

/// How long one reading of the totals serves every board.
const TOTALS_FRESH_MS: u64 = 10_000;

/// The last reading of the totals and when it was taken. They scan a day of ended runs, and
/// every open board asks for them: one reading every ten seconds serves them all (the lock
/// is held across the reading, so boards that ask together wait for one scan, not start one
/// each).
#[derive(Default)]
pub struct TotalsCache(tokio::sync::Mutex<Option<(u64, Totals)>>);

impl TotalsCache {
    /// The totals as of at most ten seconds ago, read from `store` when the last reading is older.
    pub async fn read(&self, store: &dyn Store) -> Result<Totals, StoreError> {
        let mut cached = self.0.lock().await;
        let now = freeway::clock::epoch_ms();
        if let Some((at, totals)) = cached.as_ref()
            && now.saturating_sub(*at) < TOTALS_FRESH_MS
        {
            return Ok(totals.clone());
        }
        // Whole buckets, the last one holding now.
        let end = (now / TOTALS_BUCKET_MS + 1) * TOTALS_BUCKET_MS;
        let from_ms = end - TOTALS_SPAN_MS;
        let counts = store.ended_since(from_ms, TOTALS_BUCKET_MS).await?;
        let totals = Totals {
            from_ms,
            bucket_ms: TOTALS_BUCKET_MS,
            buckets: TOTALS_SPAN_MS / TOTALS_BUCKET_MS,
            counts,
        };
        *cached = Some((now, totals.clone()));
        Ok(totals)
    }
}
