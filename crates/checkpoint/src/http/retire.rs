//! `POST /v1/checkpoint/retire`: stop and refuse attempts.

use axum::body::Body;
use axum::extract::State;
use axum::response::Response;

use super::{ApiError, Shared, body, doc, json};
use crate::wire::{ErrorReply, KeysReply, KeysRequest};

/// Stop and refuse attempts, and every earlier one of their rollouts.
#[utoipa::path(
    post,
    path = "/v1/checkpoint/retire",
    operation_id = "checkpoint_retire",
    tag = "checkpoint",
    request_body = KeysRequest,
    responses(
        (status = 200, description = "The keys acted on.", body = KeysReply),
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
    let req: KeysRequest = body(raw).await?;
    json(&control.retire(req).await?)
}
