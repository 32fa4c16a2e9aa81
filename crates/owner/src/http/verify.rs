//! `POST /v1/owner/sessions/{id}/verify`: grade the session, then end it.

use axum::extract::{Path, State};
use axum::response::Response;

use super::Shared;
use super::body::SessionId;
use super::wire::{ApiError, json};

/// Grade the session with the task's verify command, then end it.
///
/// On an error the session is kept, so the caller can try again or close it.
#[utoipa::path(
    post,
    path = "/v1/owner/sessions/{id}/verify",
    operation_id = "owner_verify",
    tag = "owner",
    params(SessionId),
    responses(
        (status = 200, description = "The grade.", body = crate::verdict::Verdict),
        super::SessionErrors,
    ),
    security(("bearer" = [])),
)]
pub(super) async fn handle(
    State(owner): Shared,
    Path(SessionId { id: session }): Path<SessionId>,
) -> Result<Response, ApiError> {
    json(&owner.verify(&session).await?)
}
