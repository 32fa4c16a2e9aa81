//! `POST /v1/checkpoint/forget`: drop what is remembered of rollouts.

use axum::extract::State;
use axum::response::Response;
use rollpoint_api::Body;

use super::body::Call;
use super::{ApiError, CallErrors, Shared, json};
use crate::wire::{KeysReply, KeysRequest};

/// Drop what is remembered of rollouts.
#[utoipa::path(
    post,
    path = "/v1/checkpoint/forget",
    operation_id = "checkpoint_forget",
    tag = "checkpoint",
    request_body = KeysRequest,
    responses(
        (status = 200, description = "The keys acted on.", body = KeysReply),
        CallErrors,
    ),
    security(("bearer" = [])),
)]
pub(super) async fn handle(
    State(control): Shared,
    Body(req, _): Call<KeysRequest>,
) -> Result<Response, ApiError> {
    json(&control.forget(req).await?)
}
