//! `POST /v1/fleet/pause` and `POST /v1/fleet/continue`: the fleet paused for a weight update
//! on every participant (the model holds every model call, each agent parks its runs in
//! place), then continued under the trainer's new policy version (docs/design/models.md).
//! Independent of checkpoints: one may be taken while the fleet is paused.

use std::sync::Arc;

use axum::extract::State;
use axum::response::Response;
use rollpoint_api::error::{ApiError, json};
use rollpoint_api::wire::{FleetContinueRequest, FleetPauseRequest, FleetReport, InFlightCalls};
use rollpoint_api::{Body, Versioned};

use super::Shared;

/// Pause the fleet for a weight update.
///
/// Every in-flight rollout is paused in place (its launch frozen and confirmed, as at a
/// checkpoint) and no model call goes upstream until the fleet continues; calls generating
/// now `finish` under the old version or `abort` and are asked again after (default: a
/// run's `fleet_calls`, else `finish`). Answers once every rollout that can be is parked.
/// Time paused is not charged to a task's time limit.
#[utoipa::path(
    post,
    path = "/v1/fleet/pause",
    operation_id = "fleet_pause",
    tags = ["coordinator", "run"],
    request_body = FleetPauseRequest,
    responses(
        (status = 200, description = "The fleet is paused.", body = FleetReport),
        (status = 400, description = rollpoint_api::error::doc::BAD_REQUEST, body = rollpoint_api::error::ErrorBody),
        (status = 401, description = rollpoint_api::error::doc::UNAUTHORIZED, body = rollpoint_api::error::ErrorBody),
        (status = 502, description = "A participant failed, the run has no model gateway, or the run is ending (`failed`).", body = rollpoint_api::error::ErrorBody),
    ),
    security(("bearer" = [])),
)]
pub(super) async fn pause(
    State(shared): State<Arc<Shared>>,
    Body(req, _): Versioned<FleetPauseRequest>,
) -> Result<Response, ApiError> {
    fleet(&shared, true, req.calls.unwrap_or_default(), None).await
}

/// Continue the fleet after a weight update, under its new policy version.
///
/// Model calls asked from now on carry `version` (in the ledger, the trajectories and the
/// export); the paused rollouts continue in place.
#[utoipa::path(
    post,
    path = "/v1/fleet/continue",
    operation_id = "fleet_continue",
    tags = ["coordinator", "run"],
    request_body = FleetContinueRequest,
    responses(
        (status = 200, description = "The fleet goes on.", body = FleetReport),
        (status = 400, description = "A bad `version` (`bad_request`, naming it).", body = rollpoint_api::error::ErrorBody),
        (status = 401, description = rollpoint_api::error::doc::UNAUTHORIZED, body = rollpoint_api::error::ErrorBody),
        (status = 502, description = "A participant failed, the run has no model gateway, or the run is ending (`failed`).", body = rollpoint_api::error::ErrorBody),
    ),
    security(("bearer" = [])),
)]
pub(super) async fn resume(
    State(shared): State<Arc<Shared>>,
    Body(req, _): Versioned<FleetContinueRequest>,
) -> Result<Response, ApiError> {
    req.check()?;
    fleet(&shared, false, InFlightCalls::default(), req.version).await
}

/// The fleet paused (`pause`) or continued on every participant, and its report.
async fn fleet(
    shared: &Shared,
    pause: bool,
    calls: InFlightCalls,
    version: Option<String>,
) -> Result<Response, ApiError> {
    let report = shared.coordinator.fleet(pause, calls, version).await?;
    Ok(json(axum::http::StatusCode::OK, &report))
}
