//! `POST /v1/checkpoint/restore`: install a published checkpoint's records as next attempts.

use axum::extract::State;
use axum::response::Response;
use rollpoint_api::Body;

use super::body::Call;
use super::{ApiError, CallErrors, Shared, json};
use crate::wire::{RestoreReply, RestoreRequest};

/// Install a published checkpoint's records as the next attempts.
#[utoipa::path(
    post,
    path = "/v1/checkpoint/restore",
    operation_id = "checkpoint_restore",
    tag = "checkpoint",
    request_body = RestoreRequest,
    responses(
        (status = 200, description = "The records are installed as the next attempts.", body = RestoreReply),
        CallErrors,
    ),
    security(("bearer" = [])),
)]
pub(super) async fn handle(
    State(control): Shared,
    Body(req, _): Call<RestoreRequest>,
) -> Result<Response, ApiError> {
    json(&control.restore(req).await?)
}
