//! `POST /v1/owner/launches/continue` (`{"launches": [..]}`): continue
//! launches a batched pause froze, as one step.

use axum::extract::State;
use axum::response::Response;

use super::Shared;
use super::body::Launches;
use super::wire::{ApiError, ContinuedReply, LaunchesBody, json};
use rollpoint_api::Body;

/// Continue launches a batched pause froze, as one step.
///
/// A receipt per launch, in order; a launch whose session or sandbox is
/// gone has `already_ended`.
#[utoipa::path(
    post,
    path = "/v1/owner/launches/continue",
    operation_id = "owner_continue_launches",
    tag = "owner",
    request_body = LaunchesBody,
    responses(
        (status = 200, description = "A receipt per launch, in order.", body = ContinuedReply),
        super::BatchErrors,
    ),
    security(("bearer" = [])),
)]
pub(super) async fn handle(
    State(owner): Shared,
    Body(launches, _): Launches,
) -> Result<Response, ApiError> {
    let receipts = owner.continue_launches(&launches).await?;
    json(&ContinuedReply { receipts })
}
