//! `DELETE /v1/owner/snapshots/{id}`: delete a snapshot no checkpoint keeps.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse as _, Response};

use super::Shared;
use super::wire::ApiError;

pub(super) async fn handle(
    State(owner): Shared,
    Path(snapshot): Path<String>,
) -> Result<Response, ApiError> {
    owner.delete_snapshot(&snapshot).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}
