//! `GET /v1/rollouts/{id}`: the `RolloutResult` v1 once the rollout is
//! done, its status before (or when its run was lost); 404 for an unknown
//! id.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;

use super::Shared;
use super::known::{Known, RolloutId};
use super::table::Outcome;
use rollpoint_api::error::{ApiError, json};
use rollpoint_api::wire::RolloutStatus;
use rollpoint_driver::RolloutResult;
use serde::Serialize;

/// A rollout's result once it is done, its status before.
#[utoipa::path(
    get,
    path = "/v1/rollouts/{id}",
    operation_id = "agent_show",
    tag = "agent",
    params(RolloutId),
    responses(
        (status = 200, description = "The `RolloutResult` v1 when done, else the rollout's status.", body = Answer),
        (status = 401, description = rollpoint_api::error::doc::UNAUTHORIZED, body = rollpoint_api::error::ErrorBody),
        (status = 404, description = "No such rollout here (`not_found`).", body = rollpoint_api::error::ErrorBody),
    ),
    security(("bearer" = [])),
)]
pub(super) async fn handle(
    State(shared): State<Arc<Shared>>,
    Known { id, seen }: Known,
) -> Result<Response, ApiError> {
    Ok(match &seen.outcome {
        Some(Outcome::Done(result)) => json(StatusCode::OK, &Answer::Result(result.as_ref())),
        _ => json(StatusCode::OK, &Answer::Status(shared.status(&id, &seen))),
    })
}

/// The reply: the result once done, else the status (either as it is).
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(untagged)]
#[schema(as = RolloutAnswer)]
enum Answer<'a> {
    Result(&'a RolloutResult),
    Status(RolloutStatus),
}
