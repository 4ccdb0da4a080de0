//! The audit trail: every operator action (a rest cleared, a pool or route paused, a run
//! cancelled, retried, woken or its tool call answered, a bulk action) as one entry of who, what,
//! on which target and what came of it. The console shows it (`GET /v1/audit`), so an operator
//! can tell why a run was cancelled or a route closed without reading logs.
//!
//! It is kept in the store, not in Redis: it is the record, and it outlives Redis's data.

use super::StoreError;
use async_trait::async_trait;

/// The most entries one page holds.
pub const MAX_AUDIT_PAGE: u32 = 200;
/// The longest `detail` kept, in bytes; longer is cut (a reason is the operator's free text).
pub const MAX_AUDIT_DETAIL: usize = 1_000;

/// One operator action.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AuditEntry {
    /// A ULID: entries sort by it as by time.
    pub id: String,
    pub t_ms: u64,
    /// Which credential acted: `admin token`, or `api token for user …`; never the token.
    pub actor: String,
    /// `clear`, `pause`, `cancel`, `retry`, `wake`, `approve`, `deny`, `bulk_retry`,
    /// `bulk_cancel`.
    pub action: String,
    /// What it acted on: a run id, `pool/<instance>`, `route/<route key>`, or a bulk action's
    /// filter.
    pub target: String,
    /// What came of it, in words.
    pub detail: String,
}

impl AuditEntry {
    /// An entry made now, its detail cut to [`MAX_AUDIT_DETAIL`].
    pub fn now(actor: &str, action: &str, target: &str, detail: &str) -> AuditEntry {
        AuditEntry {
            id: next_id(),
            t_ms: crate::clock::epoch_ms(),
            actor: actor.to_string(),
            action: action.to_string(),
            target: crate::text::cut(target, MAX_AUDIT_DETAIL),
            detail: crate::text::cut(detail, MAX_AUDIT_DETAIL),
        }
    }
}

/// Where the audit trail is kept.
#[async_trait]
pub trait AuditLog: Send + Sync {
    async fn record_action(&self, entry: &AuditEntry) -> Result<(), StoreError>;
    /// The newest entries first: at most `limit` (1 to [`MAX_AUDIT_PAGE`]), older than the entry
    /// `before` when given.
    async fn actions(
        &self,
        before: Option<&str>,
        limit: u32,
    ) -> Result<Vec<AuditEntry>, StoreError>;
}

/// A ULID greater than every other this process made: entries of one millisecond keep the order
/// they were made in (plain ULIDs order them at random).
fn next_id() -> String {
    static IDS: std::sync::Mutex<Option<ulid::Generator>> = std::sync::Mutex::new(None);
    let mut ids = IDS.lock().unwrap_or_else(|e| e.into_inner());
    let generator = ids.get_or_insert_with(ulid::Generator::new);
    generator
        .generate()
        .unwrap_or_else(|_| ulid::Ulid::generate())
        .to_string()
}
