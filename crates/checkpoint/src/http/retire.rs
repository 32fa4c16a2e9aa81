//! `POST /v1/checkpoint/retire`: stop and refuse attempts.

use axum::body::Body;
use axum::extract::State;
use axum::response::Response;

use super::{ApiError, CallErrors, Shared, body, json};
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
pub(super) async fn handle(State(control): Shared, raw: Body) -> Result<Response, ApiError> {
    let req: KeysRequest = body(raw).await?;
    json(&control.retire(req).await?)
}
