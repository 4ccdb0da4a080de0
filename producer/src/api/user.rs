//! Per-user isolation (docs/design.md §6). The API's callers are trusted back ends holding the API token,
//! acting for many users; a caller that acts for one user names it with `?user_id=` on any route
//! about one run (`GET /v1/runs/{id}`, `…/events`, `POST …/approvals`, the board's run detail),
//! and a run of another user is then `404`, exactly like a run that does not exist, so an id
//! guessed or leaked across users tells nothing. `GET /v1/board/runs?user_id=` lists only that
//! user's runs, and `DELETE /v1/connections/{id}?user_id=` already scoped connections the same way.
//! Without `user_id` the caller sees every run: that is the operator's and the board's view.

use super::error::ApiError;
use axum::extract::{FromRequestParts, Query};
use axum::http::request::Parts;
use freeway::run::RunRecord;
use freeway::store::Store;
use serde::Deserialize;

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct UserQuery {
    user_id: Option<String>,
}

/// The `?user_id=` a request is scoped to, if any.
#[derive(Debug, Clone, Default)]
pub struct ForUser(pub Option<String>);

impl<S: Send + Sync> FromRequestParts<S> for ForUser {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let Query(query) = Query::<UserQuery>::from_request_parts(parts, state)
            .await
            .map_err(|r| ApiError::InvalidRequest(r.body_text()))?;
        ForUser::of(query.user_id)
    }
}

impl ForUser {
    /// The scope a `user_id` query field gives: none when absent; an empty one is a mistake.
    pub fn of(user_id: Option<String>) -> Result<ForUser, ApiError> {
        match user_id {
            Some(u) if u.is_empty() => Err(ApiError::InvalidRequest(
                "user_id, when given, must not be empty".into(),
            )),
            user => Ok(ForUser(user)),
        }
    }

    /// Whether a run of `owner` is visible to this request.
    pub fn sees(&self, owner: &str) -> bool {
        self.0.as_deref().is_none_or(|u| u == owner)
    }

    /// The run `run_id` when it exists and this request may see it; `404` otherwise.
    pub async fn run(&self, store: &dyn Store, run_id: &str) -> Result<RunRecord, ApiError> {
        store
            .run(run_id)
            .await?
            .filter(|r| self.sees(&r.user_id))
            .ok_or_else(|| not_found(run_id))
    }
}

pub fn not_found(run_id: &str) -> ApiError {
    ApiError::NotFound(format!("run {run_id} not found"))
}
