//! `POST /v1/checkpoint/resume`: end or abort a checkpoint.

use axum::extract::State;
use axum::response::Response;
use rollpoint_api::Body;

use super::body::Call;
use super::{ApiError, CallErrors, Shared, json};
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
pub(super) async fn handle(
    State(control): Shared,
    Body(req, _): Call<ResumeRequest>,
) -> Result<Response, ApiError> {
    json(&control.resume(req).await?)
}
