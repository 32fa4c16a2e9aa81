//! `POST /v1/owner/sessions/{id}/snapshot` `{"checkpoint": ..}`: snapshot the
//! session's sandbox for a checkpoint; replies with the session record.

use axum::extract::{Path, State};
use axum::response::Response;

use super::Shared;
use super::body::{Json, SessionId};
use super::wire::{ApiError, SnapshotBody, json};
use rollpoint_api::Body;

/// Snapshot the session's sandbox for a checkpoint.
///
/// Repeating the call for the same checkpoint returns the same record.
#[utoipa::path(
    post,
    path = "/v1/owner/sessions/{id}/snapshot",
    operation_id = "owner_snapshot",
    tag = "owner",
    params(SessionId),
    request_body = SnapshotBody,
    responses(
        (status = 200, description = "The session record a restore takes.", body = crate::record::SessionRecord),
        (status = 400, description = super::doc::BAD_REQUEST, body = super::wire::ErrorReply),
        (status = 401, description = super::doc::UNAUTHORIZED, body = super::wire::ErrorReply),
        (status = 404, description = super::doc::NOT_FOUND, body = super::wire::ErrorReply),
        (status = 409, description = super::doc::NOT_CAPTURABLE, body = super::wire::ErrorReply),
        (status = 413, description = super::doc::TOO_LARGE, body = super::wire::ErrorReply),
        (status = 500, description = super::doc::FAILED, body = super::wire::ErrorReply),
    ),
    security(("bearer" = [])),
)]
pub(super) async fn handle(
    State(owner): Shared,
    Path(SessionId { id: session }): Path<SessionId>,
    Body(body, _): Json<SnapshotBody>,
) -> Result<Response, ApiError> {
    json(&owner.snapshot(&session, &body.checkpoint).await?)
}
