//! `POST /v1/checkpoint/retire`: stop and refuse attempts.

use axum::extract::State;
use axum::response::Response;
use rollpoint_api::Body;

use super::body::Call;
use super::{ApiError, CallErrors, Shared, json};
use crate::wire::{KeysReply, KeysRequest};

/// Stop and refuse attempts, and every earlier one of their rollouts.
#[utoipa::path(
    post,
    path = "/v1/checkpoint/retire",
    operation_id = "checkpoint_retire",
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
    json(&control.retire(req).await?)
}
