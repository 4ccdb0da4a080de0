//! `PUT /v1/connections/{id}` and `DELETE /v1/connections/{id}`: a user's own provider key,
//! stored sealed with `FREEWAY_SECRET_KEY` (docs/design.md §5). The key is never echoed, returned
//! or logged; the request type has no `Debug` so it cannot be printed by accident.

use super::error::{ApiError, JsonBody, PathParams};
use super::state::AppState;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use freeway::provider::ApiKey;
use freeway::store::NewConnection;
use serde::Deserialize;
use std::sync::Arc;

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PutConnection {
    user_id: String,
    provider: String,
    api_key: String,
}

/// Store or replace the connection: `204`; `409` when the id belongs to another user.
#[utoipa::path(
    put, operation_id = "putConnection", path = "/v1/connections/{id}", tag = "connections",
    params(("id" = String, Path, description = "The connection id")),
    request_body = PutConnection,
    responses((status = 204, description = "Stored"), (status = 404, description = "Unknown provider", body = crate::api::error::ErrorBody),
        (status = 409, description = "The id belongs to another user", body = crate::api::error::ErrorBody))
)]
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
    let catalog = state.enqueuer.catalog();
    state
        .store
        .put_connection(secret, &connection, catalog)
        .await?;
    tracing::info!(connection = %connection.id, user_id = %connection.user_id, provider = %connection.provider, "connection stored");
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct DeleteQuery {
    /// The owner: a connection is removed only by (the web app on behalf of) its user.
    user_id: String,
}

/// Remove `?user_id=`'s connection: `204`, or `404` when that user has none of that id (another
/// user's connection looks like none at all).
#[utoipa::path(
    delete, operation_id = "deleteConnection", path = "/v1/connections/{id}", tag = "connections",
    params(("id" = String, Path, description = "The connection id"), DeleteQuery),
    responses((status = 204, description = "Removed"), (status = 404, description = "The user has no connection of that id", body = crate::api::error::ErrorBody))
)]
pub async fn delete(
    State(state): State<Arc<AppState>>,
    PathParams(id): PathParams<String>,
    query: Result<Query<DeleteQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<StatusCode, ApiError> {
    let Query(DeleteQuery { user_id }) =
        query.map_err(|r| ApiError::InvalidRequest(r.body_text()))?;
    if !state.store.delete_connection(&user_id, &id).await? {
        return Err(ApiError::NotFound(format!("connection {id} not found")));
    }
    tracing::info!(connection = %id, %user_id, "connection deleted");
    Ok(StatusCode::NO_CONTENT)
}
