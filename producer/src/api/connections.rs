//! `PUT /v1/connections/{id}` and `DELETE /v1/connections/{id}`: a user's own provider key,
//! stored sealed with `FREEWAY_SECRET_KEY` (SPEC §7). The key is never echoed, returned or
//! logged; the request type has no `Debug` so it cannot be printed by accident.

use super::AppState;
use super::error::{ApiError, JsonBody, PathParams};
use axum::extract::{Query, State};
use axum::http::StatusCode;
use freeway::provider::ApiKey;
use freeway::store::NewConnection;
use serde::Deserialize;
use std::sync::Arc;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PutConnection {
    user_id: String,
    provider: String,
    api_key: String,
}

/// Store or replace the connection: `204`; `409` when the id belongs to another user.
pub async fn put(
    State(state): State<Arc<AppState>>,
    PathParams(id): PathParams<String>,
    JsonBody(body): JsonBody<PutConnection>,
) -> Result<StatusCode, ApiError> {
    let Some(secret) = &state.secret_key else {
        return Err(ApiError::NotConfigured(
            "FREEWAY_SECRET_KEY is not set: users' keys cannot be stored".into(),
        ));
    };
    let connection = NewConnection {
        id,
        user_id: body.user_id,
        provider: body.provider,
        api_key: ApiKey::new(body.api_key),
    };
    state.store.put_connection(secret, &connection).await?;
    tracing::info!(connection = %connection.id, user_id = %connection.user_id, provider = %connection.provider, "connection stored");
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeleteQuery {
    /// When given, the connection must belong to this user.
    user_id: Option<String>,
}

/// Remove the connection: `204`, or `404` when there is none (of that user, if named).
pub async fn delete(
    State(state): State<Arc<AppState>>,
    PathParams(id): PathParams<String>,
    query: Result<Query<DeleteQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<StatusCode, ApiError> {
    let Query(query) = query.map_err(|r| ApiError::InvalidRequest(r.body_text()))?;
    let not_found = || ApiError::NotFound(format!("connection {id} not found"));
    let owner = match (state.store.connection(&id).await?, query.user_id) {
        (Some(info), Some(user)) if info.user_id != user => return Err(not_found()),
        (Some(info), _) => info.user_id,
        (None, _) => return Err(not_found()),
    };
    if !state.store.delete_connection(&owner, &id).await? {
        return Err(not_found());
    }
    tracing::info!(connection = %id, user_id = %owner, "connection deleted");
    Ok(StatusCode::NO_CONTENT)
}
