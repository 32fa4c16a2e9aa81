//! `POST /v1/owner/sessions/{id}/exec` (an `ExecRequest`): run a command to
//! completion in the session's sandbox.

use axum::extract::{Path, State};
use axum::response::Response;
use rollpoint_proto::anchor::ExecRequest;

use super::Shared;
use super::body::{Json, SessionId};
use super::wire::{ApiError, json};
use rollpoint_api::Body;

/// Run a command to completion in the session's sandbox.
#[utoipa::path(
    post,
    path = "/v1/owner/sessions/{id}/exec",
    operation_id = "owner_exec",
    tag = "owner",
    params(SessionId),
    request_body = ExecRequest,
    responses(
        (status = 200, description = "How the command ended and its output.", body = rollpoint_proto::anchor::ExecOutput),
        super::SessionBodyErrors,
    ),
    security(("bearer" = [])),
)]
pub(super) async fn handle(
    State(owner): Shared,
    Path(SessionId { id: session }): Path<SessionId>,
    Body(req, _): Json<ExecRequest>,
) -> Result<Response, ApiError> {
    json(&owner.exec(&session, req).await?)
}
