//! `GET /v1/checkpoint/status`: kind, instance, phase, active checkpoint,
//! lease and readiness.

use axum::extract::State;
use axum::response::Response;

use super::{ApiError, Shared, doc, json};
use crate::wire::{ErrorReply, Status};

/// Where the participant stands.
#[utoipa::path(
    get,
    path = "/v1/checkpoint/status",
    operation_id = "checkpoint_status",
    tag = "checkpoint",
    responses(
        (status = 200, description = "Kind, instance, phase, active checkpoint, lease and readiness.", body = Status),
        (status = 401, description = doc::UNAUTHORIZED, body = ErrorReply),
        (status = 500, description = doc::FAILED, body = ErrorReply),
    ),
    security(("bearer" = [])),
)]
pub(super) async fn handle(State(control): Shared) -> Result<Response, ApiError> {
    json(&control.status().await?)
}
