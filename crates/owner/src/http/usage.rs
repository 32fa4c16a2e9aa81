//! `GET /v1/owner/sessions/{id}/usage`: what the session's sandbox has used.

use axum::extract::{Path, State};
use axum::response::Response;

use super::Shared;
use super::wire::{ApiError, json};

/// CPU time, peak memory, disk, the relay's bytes and the limits hit.
#[utoipa::path(
    get,
    path = "/v1/owner/sessions/{id}/usage",
    operation_id = "owner_usage",
    tag = "owner",
    params(
        ("id" = String, Path, description = "The session id."),
    ),
    responses(
        (status = 200, description = "What the current sandbox has used so far.", body = rollpoint_sandbox::ResourceUsage),
        super::SessionErrors,
    ),
    security(("bearer" = [])),
)]
pub(super) async fn handle(
    State(owner): Shared,
    Path(session): Path<String>,
) -> Result<Response, ApiError> {
    json(&owner.usage(&session).await?)
}
