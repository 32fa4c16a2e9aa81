//! `POST /v1/checkpoint/restore`: install a published checkpoint's records as next attempts.

use axum::body::Body;
use axum::extract::State;
use axum::response::Response;

use super::{ApiError, Shared, body, doc, json};
use crate::wire::{ErrorReply, RestoreReply, RestoreRequest};

/// Install a published checkpoint's records as the next attempts.
#[utoipa::path(
    post,
    path = "/v1/checkpoint/restore",
    operation_id = "checkpoint_restore",
    tag = "checkpoint",
    request_body = RestoreRequest,
    responses(
        (status = 200, description = "The records are installed as the next attempts.", body = RestoreReply),
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
    let req: RestoreRequest = body(raw).await?;
    json(&control.restore(req).await?)
}
