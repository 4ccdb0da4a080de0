//! `worker prune --older-than-days N`: the retention command (docs/api.md §2).
//!
//! SQL rows are the audit trail and are never deleted on their own; an operator runs this (by
//! hand or from cron) to delete finished runs older than N days. What it keeps and deletes is
//! described in [`freeway::store::SqlStore::prune`]. Exit 0 after pruning, 1 when the store
//! cannot be opened or written, 2 on bad configuration.

use crate::exit::{FAILED, fail};
use std::process::ExitCode;

const DAY_MS: u64 = 86_400_000;

pub(crate) fn main(days: u64) -> ExitCode {
    crate::exit::one_shot(|settings| async move { prune(&settings.database_url, days).await })
}

async fn prune(url: &str, days: u64) -> ExitCode {
    let store = match crate::wiring::store(url).await {
        Ok(s) => s,
        Err(e) => return crate::exit::start_failed(&e),
    };
    let cutoff_ms = freeway::clock::epoch_ms().saturating_sub(days.saturating_mul(DAY_MS));
    let result = store.prune(cutoff_ms).await;
    store.close().await;
    match result {
        Ok(pruned) => {
            let line = serde_json::json!({ "cutoff_ms": cutoff_ms, "pruned": pruned });
            println!("{line}");
            ExitCode::SUCCESS
        }
        Err(e) => fail(FAILED, &e.to_string()),
    }
}
