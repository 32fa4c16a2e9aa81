//! `POST /v1/checkpoint/commit`: export and write the scope's records.

use axum::body::Body;
use axum::extract::State;
use axum::response::Response;

use super::{ApiError, Shared, body, doc, json};
use crate::wire::{CommitReply, CommitRequest, ErrorReply};

/// Export the scope's records and write them durably.
///
/// They are written under `RUN_DIR/checkpoints/<checkpoint>/<kind>/<instance>/`.
#[utoipa::path(
    post,
    path = "/v1/checkpoint/commit",
    operation_id = "checkpoint_commit",
    tag = "checkpoint",
    request_body = CommitRequest,
    responses(
        (status = 200, description = "The records are durable and the manifest names them.", body = CommitReply),
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
    let req: CommitRequest = body(raw).await?;
    json(&control.commit(req).await?)
}
