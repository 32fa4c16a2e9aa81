//! `DELETE /v1/owner/sessions/{id}`: destroy the sandbox, forget the
//! session.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse as _, Response};

use super::Shared;
use super::wire::ApiError;

/// Destroy the session's sandbox and forget the session.
#[utoipa::path(
    delete,
    path = "/v1/owner/sessions/{id}",
    operation_id = "owner_close",
    tag = "owner",
    params(
        ("id" = String, Path, description = "The session id."),
    ),
    responses(
        (status = 204, description = "Closed."),
        super::SessionErrors,
    ),
    security(("bearer" = [])),
)]
pub(super) async fn handle(
    State(owner): Shared,
    Path(session): Path<String>,
) -> Result<Response, ApiError> {
    owner.close(&session).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}
