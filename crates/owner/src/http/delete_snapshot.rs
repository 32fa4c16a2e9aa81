//! `DELETE /v1/owner/snapshots/{id}`: delete a snapshot no checkpoint keeps.

use axum::extract::{Path, State};
use axum::response::Response;

use super::Shared;
use super::wire::{ApiError, no_content};

/// Delete a snapshot no checkpoint keeps.
#[utoipa::path(
    delete,
    path = "/v1/owner/snapshots/{id}",
    operation_id = "owner_delete_snapshot",
    tag = "owner",
    params(
        ("id" = String, Path, description = "The snapshot id (`<checkpoint>--<session>`)."),
    ),
    responses(
        (status = 204, description = "Deleted."),
        (status = 400, description = super::doc::BAD_REQUEST, body = super::wire::ErrorReply),
        (status = 401, description = super::doc::UNAUTHORIZED, body = super::wire::ErrorReply),
        (status = 404, description = "No such snapshot (`not_found`).", body = super::wire::ErrorReply),
        (status = 500, description = super::doc::FAILED, body = super::wire::ErrorReply),
    ),
    security(("bearer" = [])),
)]
pub(super) async fn handle(
    State(owner): Shared,
    Path(snapshot): Path<String>,
) -> Result<Response, ApiError> {
    owner.delete_snapshot(&snapshot).await?;
    no_content()
}
