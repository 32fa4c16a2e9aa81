//! `GET /v1/owner/sessions/{id}`: the session's current sandbox.

use axum::extract::{Path, State};
use axum::response::Response;

use super::Shared;
use super::body::SessionId;
use super::wire::{ApiError, json};

/// The session's current sandbox (after a restore, a fork).
#[utoipa::path(
    get,
    path = "/v1/owner/sessions/{id}",
    operation_id = "owner_access",
    tag = "owner",
    params(SessionId),
    responses(
        (status = 200, description = "Where the current sandbox lives on the host.", body = crate::owner::Access),
        super::SessionErrors,
    ),
    security(("bearer" = [])),
)]
pub(super) async fn handle(
    State(owner): Shared,
    Path(SessionId { id: session }): Path<SessionId>,
) -> Result<Response, ApiError> {
    json(&owner.access(&session).await?)
}
