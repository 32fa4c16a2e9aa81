//! `GET /v1/owner/sessions/{id}/usage`: what the session's sandbox has used.

use axum::extract::{Path, State};
use axum::response::Response;

use super::Shared;
use super::body::SessionId;
use super::wire::{ApiError, json};

/// CPU time, peak memory, disk, the relay's bytes and the limits hit.
#[utoipa::path(
    get,
    path = "/v1/owner/sessions/{id}/usage",
    operation_id = "owner_usage",
    tag = "owner",
    params(SessionId),
    responses(
        (status = 200, description = "What the current sandbox has used so far.", body = rollpoint_sandbox::ResourceUsage),
        super::SessionErrors,
    ),
    security(("bearer" = [])),
)]
pub(super) async fn handle(
    State(owner): Shared,
    Path(SessionId { id: session }): Path<SessionId>,
) -> Result<Response, ApiError> {
    json(&owner.usage(&session).await?)
}
