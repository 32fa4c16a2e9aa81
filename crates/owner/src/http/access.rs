//! `GET /v1/owner/sessions/{id}`: the session's current sandbox.

use axum::extract::{Path, State};
use axum::response::Response;

use super::Shared;
use super::wire::{ApiError, json};

/// The session's current sandbox (after a restore, a fork).
#[utoipa::path(
    get,
    path = "/v1/owner/sessions/{id}",
    operation_id = "owner_access",
    tag = "owner",
    params(
        ("id" = String, Path, description = "The session id."),
    ),
    responses(
        (status = 200, description = "Where the current sandbox lives on the host.", body = crate::owner::Access),
        super::SessionErrors,
    ),
    security(("bearer" = [])),
)]
pub(super) async fn handle(
    State(owner): Shared,
    Path(session): Path<String>,
) -> Result<Response, ApiError> {
    json(&owner.access(&session).await?)
}
