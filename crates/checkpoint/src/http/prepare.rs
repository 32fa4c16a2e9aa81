//! `POST /v1/checkpoint/prepare`: close admission and wait for a cut.

use axum::extract::State;
use axum::response::Response;
use rollpoint_api::Body;

use super::body::Call;
use super::{ApiError, CallErrors, Shared, json};
use crate::wire::{PrepareReply, PrepareRequest};

/// Close admission and wait for a consistent cut.
#[utoipa::path(
    post,
    path = "/v1/checkpoint/prepare",
    operation_id = "checkpoint_prepare",
    tag = "checkpoint",
    request_body = PrepareRequest,
    responses(
        (status = 200, description = "`prepared`, or still `preparing` when the deadline passed first (admission stays closed until resume).", body = PrepareReply),
        CallErrors,
    ),
    security(("bearer" = [])),
)]
pub(super) async fn handle(
    State(control): Shared,
    Body(req, _): Call<PrepareRequest>,
) -> Result<Response, ApiError> {
    json(&control.prepare(req).await?)
}
