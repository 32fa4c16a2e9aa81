//! `DELETE /v1/owner/sessions/{id}`: destroy the sandbox, forget the
//! session.

use axum::extract::{Path, State};
use axum::response::Response;

use super::Shared;
use super::body::SessionId;
use super::wire::{ApiError, no_content};

/// Destroy the session's sandbox and forget the session.
#[utoipa::path(
    delete,
    path = "/v1/owner/sessions/{id}",
    operation_id = "owner_close",
    tag = "owner",
    params(SessionId),
    responses(
        (status = 204, description = "Closed."),
        super::SessionErrors,
    ),
    security(("bearer" = [])),
)]
pub(super) async fn handle(
    State(owner): Shared,
    Path(SessionId { id: session }): Path<SessionId>,
) -> Result<Response, ApiError> {
    owner.close(&session).await?;
    no_content()
}
