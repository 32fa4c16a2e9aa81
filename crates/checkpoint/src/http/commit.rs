//! `POST /v1/checkpoint/commit`: export and write the scope's records.

use axum::extract::State;
use axum::response::Response;
use rollpoint_api::Body;

use super::body::Call;
use super::{ApiError, CallErrors, Shared, json};
use crate::wire::{CommitReply, CommitRequest};

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
        CallErrors,
    ),
    security(("bearer" = [])),
)]
pub(super) async fn handle(
    State(control): Shared,
    Body(req, _): Call<CommitRequest>,
) -> Result<Response, ApiError> {
    json(&control.commit(req).await?)
}
