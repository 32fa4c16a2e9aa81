//! `GET /v1/rollouts/{id}/trajectory`: the rollout's trajectory as it stands, from the
//! gateway's records of it (asked over the gateway's control route) and the result held
//! here; trainable once the rollout has its result.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;

use super::Shared;
use super::known::{Known, RolloutId};
use super::table::Outcome as Held;
use rollpoint_api::error::{ApiError, ErrorCode, json};
use rollpoint_trajectory::{Outcome, Trajectory, build};

/// A rollout's trajectory.
#[utoipa::path(
    get,
    path = "/v1/rollouts/{id}/trajectory",
    operation_id = "agent_trajectory",
    tag = "agent",
    params(RolloutId),
    responses(
        (status = 200, description = "The trajectory document (v 1).", body = Trajectory),
        (status = 401, description = rollpoint_api::error::doc::UNAUTHORIZED, body = rollpoint_api::error::ErrorBody),
        (status = 404, description = "No such rollout here (`not_found`).", body = rollpoint_api::error::ErrorBody),
        (status = 502, description = "The agent has no gateway, or its records could not be read (`failed`).", body = rollpoint_api::error::ErrorBody),
    ),
    security(("bearer" = [])),
)]
pub(super) async fn handle(
    State(shared): State<Arc<Shared>>,
    Known { id, seen }: Known,
) -> Result<Response, ApiError> {
    let gateway = shared.gateway.as_ref().ok_or_else(|| {
        ApiError::new(
            ErrorCode::Failed,
            "this agent was started without --gateway: it has no ledger to read",
        )
    })?;
    let records = gateway
        .records(&id)
        .await
        .map_err(|e| ApiError::new(ErrorCode::Failed, e.to_string()))?;
    let outcome = match &seen.outcome {
        Some(Held::Done(result)) => Some(Outcome::of(result)),
        _ => None,
    };
    let t = build(&id, &records, outcome.as_ref(), shared.token_breaks);
    Ok(json(StatusCode::OK, &t))
}
