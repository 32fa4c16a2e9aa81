//! `POST /v1/owner/launches/pause` (`{"launches": [..]}`): pause the
//! launches of many sessions as one step, a checkpoint's prepare.

use axum::extract::State;
use axum::response::Response;

use super::Shared;
use super::body::Launches;
use super::wire::{ApiError, LaunchesBody, PausedReply, json};
use rollpoint_api::Body;

/// Pause the launches of many sessions as one step.
///
/// Per launch, in order, its receipt: confirmed (every process of the launch
/// frozen) or failed and undone; `null` for a launch left to its
/// supervisor (its session is not open here, it has ended, or the owner
/// cannot freeze it from outside).
#[utoipa::path(
    post,
    path = "/v1/owner/launches/pause",
    operation_id = "owner_pause_launches",
    tag = "owner",
    request_body = LaunchesBody,
    responses(
        (status = 200, description = "A receipt or null per launch, in order.", body = PausedReply),
        super::BatchErrors,
    ),
    security(("bearer" = [])),
)]
pub(super) async fn handle(
    State(owner): Shared,
    Body(launches, _): Launches,
) -> Result<Response, ApiError> {
    let receipts = owner.pause_launches(&launches).await?;
    json(&PausedReply { receipts })
}
