//! `POST /v1/checkpoint/fleet`: pause or continue a participant's share of the fleet.

use axum::extract::State;
use axum::response::Response;
use rollpoint_api::Body;

use super::body::Call;
use super::{ApiError, CallErrors, Shared, json};
use crate::wire::{FleetReply, FleetRequest};

/// Pause this participant's share of the fleet for a weight update, or continue it.
///
/// The model holds every model call (and on continue tags later ones with `version`); an
/// agent parks its runs in place. Independent of checkpoints; idempotent.
#[utoipa::path(
    post,
    path = "/v1/checkpoint/fleet",
    operation_id = "checkpoint_fleet",
    tag = "checkpoint",
    request_body = FleetRequest,
    responses(
        (status = 200, description = "Its share of the fleet.", body = FleetReply),
        CallErrors,
    ),
    security(("bearer" = [])),
)]
pub(super) async fn handle(
    State(control): Shared,
    Body(req, _): Call<FleetRequest>,
) -> Result<Response, ApiError> {
    json(&control.fleet(req).await?)
}
