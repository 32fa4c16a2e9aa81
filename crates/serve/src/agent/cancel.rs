//! `DELETE /v1/rollouts/{id}`: cancels a rollout in flight (its launch is
//! killed and its session closed) and returns its `RolloutResult` v1
//! (status `cancelled`, unless it finished first). 404 for an unknown id;
//! 409 when it already has a result.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::response::Response;

use super::Shared;
use super::known::{Known, RolloutId};
use super::result::ended;
use rollpoint_api::error::{ApiError, ErrorCode};

/// How long the result of a cancelled run may take to arrive after the
/// run ended.
const SETTLE: Duration = Duration::from_secs(30);

/// Cancel a rollout in flight and return its result.
///
/// Its launch is killed and its session closed; the result's status is
/// `cancelled` unless it finished first.
#[utoipa::path(
    delete,
    path = "/v1/rollouts/{id}",
    operation_id = "agent_cancel",
    tag = "agent",
    params(RolloutId),
    responses(
        (status = 200, description = "The rollout's result.", body = rollpoint_driver::RolloutResult),
        (status = 401, description = rollpoint_api::error::doc::UNAUTHORIZED, body = rollpoint_api::error::ErrorBody),
        (status = 404, description = "No such rollout here (`not_found`).", body = rollpoint_api::error::ErrorBody),
        (status = 409, description = "The rollout has already finished (`conflict`).", body = rollpoint_api::error::ErrorBody),
        (status = 500, description = "The rollout's run ended without a result (`lost`).", body = rollpoint_api::error::ErrorBody),
        (status = 502, description = "The cancel failed, or no result came (`failed`).", body = rollpoint_api::error::ErrorBody),
    ),
    security(("bearer" = [])),
)]
pub(super) async fn handle(
    State(shared): State<Arc<Shared>>,
    Known { id, seen }: Known,
) -> Result<Response, ApiError> {
    if seen.outcome.is_some() {
        return Err(ApiError::new(
            ErrorCode::Conflict,
            format!("rollout {id} has already finished"),
        ));
    }
    if let Err(e) = shared.runs.cancel(&id).await {
        return Err(ApiError::new(
            ErrorCode::Failed,
            format!("cancel of rollout {id}: {e}"),
        ));
    }
    let mut seen = seen;
    let _arrived = tokio::time::timeout(SETTLE, seen.changes.wait_for(Option::is_some))
        .await
        .is_ok_and(|r| r.is_ok());
    let seen = shared.seen(&id)?;
    ended(&id, &seen).unwrap_or_else(|| {
        Err(ApiError::new(
            ErrorCode::Failed,
            format!(
                "rollout {id}: cancelled, but no result within {} s",
                SETTLE.as_secs()
            ),
        ))
    })
}
