//! `POST /v1/owner/sessions/{id}/exec` (an `ExecRequest`): run a command to
//! completion in the session's sandbox.

use axum::body::Body;
use axum::extract::{Path, State};
use axum::response::Response;
use rollpoint_proto::anchor::ExecRequest;

use super::wire::{ApiError, json};
use super::{Shared, read_json};

/// Run a command to completion in the session's sandbox.
#[utoipa::path(
    post,
    path = "/v1/owner/sessions/{id}/exec",
    operation_id = "owner_exec",
    tag = "owner",
    params(
        ("id" = String, Path, description = "The session id."),
    ),
    request_body = ExecRequest,
    responses(
        (status = 200, description = "How the command ended and its output.", body = rollpoint_proto::anchor::ExecOutput),
        super::SessionBodyErrors,
    ),
    security(("bearer" = [])),
)]
pub(super) async fn handle(
    State(owner): Shared,
    Path(session): Path<String>,
    body: Body,
) -> Result<Response, ApiError> {
    let req: ExecRequest = read_json(body).await?;
    json(&owner.exec(&session, req).await?)
}
