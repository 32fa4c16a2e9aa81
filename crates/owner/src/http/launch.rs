//! `POST /v1/owner/sessions/{id}/launch` (a `LaunchRequest`): start a
//! harness launch under its own supervisor; replies with its session
//! directory.

use axum::extract::{Path, State};
use axum::response::Response;
use rollpoint_proto::anchor::LaunchRequest;

use super::Shared;
use super::body::{Json, SessionId};
use super::wire::{ApiError, json};
use rollpoint_api::Body;

/// Start a harness launch under its own supervisor.
#[utoipa::path(
    post,
    path = "/v1/owner/sessions/{id}/launch",
    operation_id = "owner_launch",
    tag = "owner",
    params(SessionId),
    request_body = LaunchRequest,
    responses(
        (status = 200, description = "The launch and its session directory.", body = crate::owner::Launched),
        super::SessionBodyErrors,
    ),
    security(("bearer" = [])),
)]
pub(super) async fn handle(
    State(owner): Shared,
    Path(SessionId { id: session }): Path<SessionId>,
    Body(req, _): Json<LaunchRequest>,
) -> Result<Response, ApiError> {
    json(&owner.launch(&session, req).await?)
}
