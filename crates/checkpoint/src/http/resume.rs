//! `POST /v1/checkpoint/resume`: end or abort a checkpoint.

use axum::body::Body;
use axum::extract::State;
use axum::response::Response;

use super::{ApiError, CallErrors, Shared, body, json};
use crate::wire::{ResumeReply, ResumeRequest};

/// End (or abort) a checkpoint or restore.
#[utoipa::path(
    post,
    path = "/v1/checkpoint/resume",
    operation_id = "checkpoint_resume",
    tag = "checkpoint",
    request_body = ResumeRequest,
    responses(
        (status = 200, description = "The checkpoint or restore is over.", body = ResumeReply),
        CallErrors,
    ),
    security(("bearer" = [])),
)]
pub(super) async fn handle(State(control): Shared, raw: Body) -> Result<Response, ApiError> {
    let req: ResumeRequest = body(raw).await?;
    json(&control.resume(req).await?)
}
