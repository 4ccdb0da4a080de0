//! The audit trail of operator actions (`GET /v1/audit`, admin token) and the one place every
//! action handler records itself: [`record`] logs the action and keeps it in the store's
//! [`AuditLog`], so the console can show who did what after the logs have rotated.

use super::auth::{presents_admin, require_admin};
use super::error::ApiError;
use super::state::AppState;
use axum::Json;
use axum::extract::{Query, State};
use axum::http::HeaderMap;
use freeway::store::{AuditEntry, AuditLog, MAX_AUDIT_PAGE};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// The operator, as the audit names whoever presents the admin token.
pub const ADMIN: &str = "admin token";

/// Who acts, as the audit names it: never the token itself.
pub fn actor_name(state: &AppState, headers: &HeaderMap, user: Option<&str>) -> String {
    match (presents_admin(&state.tokens, headers), user) {
        (true, _) => ADMIN.into(),
        (false, Some(user)) => format!("api token for user {user}"),
        (false, None) => "api token".into(),
    }
}

/// Log an operator action and keep it in the audit trail. The action has happened: a store that
/// cannot keep the entry is logged as an error, not turned into a failure of the action.
pub async fn record(state: &AppState, actor: &str, action: &str, target: &str, detail: &str) {
    let entry = AuditEntry::now(actor, action, target, detail);
    tracing::warn!(
        by = %entry.actor,
        action = %entry.action,
        target = %entry.target,
        detail = %entry.detail,
        "operator action"
    );
    if let Err(error) = state.store.record_action(&entry).await {
        tracing::error!(%error, action, target, "the audit trail could not keep this action");
    }
}

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct AuditQuery {
    /// The `next` of the page before: entries older than it.
    before: Option<String>,
    limit: Option<u32>,
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct AuditPage {
    entries: Vec<AuditEntry>,
    /// The `before` of the next page; `null` on the last.
    next: Option<String>,
}

/// `GET /v1/audit?before=&limit=`: the newest actions first (admin token).
#[utoipa::path(
    get, operation_id = "listAudit", path = "/v1/audit", tag = "operations",
    params(AuditQuery),
    responses((status = 200, description = "Operator actions, newest first", body = AuditPage))
)]
pub async fn list(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    query: Result<Query<AuditQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<AuditPage>, ApiError> {
    require_admin(&state.tokens, &headers)?;
    let Query(query) = query.map_err(|r| ApiError::InvalidRequest(r.body_text()))?;
    let limit = query.limit.unwrap_or(50);
    if !(1..=MAX_AUDIT_PAGE).contains(&limit) {
        return Err(ApiError::InvalidRequest(format!(
            "limit must be 1-{MAX_AUDIT_PAGE}"
        )));
    }
    let before = query.before.filter(|b| !b.is_empty());
    if let Some(b) = &before
        && ulid::Ulid::from_string(b).is_err()
    {
        return Err(ApiError::InvalidRequest(
            "before is not one this API handed out (use next)".into(),
        ));
    }
    let entries = state.store.actions(before.as_deref(), limit).await?;
    let next = (entries.len() == limit as usize)
        .then(|| entries.last().map(|e| e.id.clone()))
        .flatten();
    Ok(Json(AuditPage { entries, next }))
}
