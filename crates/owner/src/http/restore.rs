//! `POST /v1/owner/restore` (a session record): fork the record's snapshot
//! into the session's new current sandbox.

use axum::extract::State;
use axum::response::Response;

use super::Shared;
use super::body::Record;
use super::wire::{ApiError, json};
use crate::record::SessionRecord;
use rollpoint_api::Body;

/// Fork a session record's snapshot into the session's new current sandbox.
#[utoipa::path(
    post,
    path = "/v1/owner/restore",
    operation_id = "owner_restore",
    tag = "owner",
    request_body = SessionRecord,
    responses(
        (status = 200, description = "The session's new current sandbox.", body = crate::owner::Access),
        (status = 400, description = super::doc::BAD_REQUEST, body = super::wire::ErrorReply),
        (status = 401, description = super::doc::UNAUTHORIZED, body = super::wire::ErrorReply),
        (status = 404, description = "No such snapshot (`not_found`).", body = super::wire::ErrorReply),
        (status = 413, description = super::doc::TOO_LARGE, body = super::wire::ErrorReply),
        (status = 422, description = super::doc::UNPROCESSABLE, body = super::wire::ErrorReply),
        (status = 500, description = super::doc::FAILED, body = super::wire::ErrorReply),
    ),
    security(("bearer" = [])),
)]
pub(super) async fn handle(
    State(owner): Shared,
    Body(record, _): Record,
) -> Result<Response, ApiError> {
    json(&owner.restore(record).await?)
}
