//! `POST /v1/checkpoint/resume`: end or abort a checkpoint.

use axum::body::Body;
use axum::extract::State;
use axum::response::Response;

use super::{ApiError, Shared, body, doc, json};
use crate::wire::{ErrorReply, ResumeReply, ResumeRequest};

/// End (or abort) a checkpoint or restore.
#[utoipa::path(
    post,
    path = "/v1/checkpoint/resume",
    operation_id = "checkpoint_resume",
    tag = "checkpoint",
    request_body = ResumeRequest,
    responses(
        (status = 200, description = "The checkpoint or restore is over.", body = ResumeReply),
        (status = 400, description = doc::BAD_REQUEST, body = ErrorReply),
        (status = 401, description = doc::UNAUTHORIZED, body = ErrorReply),
        (status = 409, description = doc::CONFLICT, body = ErrorReply),
        (status = 413, description = doc::TOO_LARGE, body = ErrorReply),
        (status = 500, description = doc::FAILED, body = ErrorReply),
        (status = 504, description = doc::DEADLINE, body = ErrorReply),
    ),
    security(("bearer" = [])),
)]
pub(super) async fn handle(State(control): Shared, raw: Body) -> Result<Response, ApiError> {
    let req: ResumeRequest = body(raw).await?;
    json(&control.resume(req).await?)
}
