//! `GET /v1/rollouts`: every rollout known here and where it stands. The
//! coordinator's default checkpoint scope is the in-flight ones.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;

use super::Shared;
use rollpoint_api::error::json;
use rollpoint_api::wire::{RolloutList, WIRE_VERSION};

/// Every rollout known here and where it stands.
#[utoipa::path(
    get,
    path = "/v1/rollouts",
    operation_id = "agent_list",
    tag = "agent",
    responses(
        (status = 200, description = "The rollouts; the in-flight ones are the coordinator's default checkpoint scope.", body = rollpoint_api::wire::RolloutList),
        (status = 401, description = rollpoint_api::error::doc::UNAUTHORIZED, body = rollpoint_api::error::ErrorBody),
    ),
    security(("bearer" = [])),
)]
pub(super) async fn handle(State(shared): State<Arc<Shared>>) -> Response {
    let rollouts = shared
        .table
        .list()
        .into_iter()
        .map(|(rollout, seen)| shared.status(&rollout, &seen))
        .collect();
    json(
        StatusCode::OK,
        &RolloutList {
            v: WIRE_VERSION,
            rollouts,
        },
    )
}
