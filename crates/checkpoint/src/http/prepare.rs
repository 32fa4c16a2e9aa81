//! `POST /v1/checkpoint/prepare`: close admission and wait for a cut.

use axum::body::Body;
use axum::extract::State;
use axum::response::Response;

use super::{ApiError, Shared, body, doc, json};
use crate::wire::{ErrorReply, PrepareReply, PrepareRequest};

/// Close admission and wait for a consistent cut.
#[utoipa::path(
    post,
    path = "/v1/checkpoint/prepare",
    operation_id = "checkpoint_prepare",
    tag = "checkpoint",
    request_body = PrepareRequest,
    responses(
        (status = 200, description = "`prepared`, or still `preparing` when the deadline passed first (admission stays closed until resume).", body = PrepareReply),
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
    let req: PrepareRequest = body(raw).await?;
    json(&control.prepare(req).await?)
}
