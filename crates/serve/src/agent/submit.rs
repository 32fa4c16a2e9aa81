//! `POST /v1/rollouts`: a `RolloutTask` v1 starts as attempt 0. 202 with
//! the rollout id and attempt; 409 when the id is known here; 400 naming
//! the field of a bad task.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use rollpoint_driver::{DriverError, RolloutTask};

use super::Shared;
use rollpoint_api::error::{ApiError, json};
use rollpoint_api::{Body, Format};

/// A rollout task as its body: `RolloutTask::decode`, a bad field named
/// by its path under `task`.
#[derive(Debug)]
pub(super) struct Task;

impl Format<RolloutTask, ApiError> for Task {
    fn decode(bytes: axum::body::Bytes) -> Result<RolloutTask, ApiError> {
        RolloutTask::decode(&bytes).map_err(|e| match e {
            DriverError::Task { field, message } => {
                ApiError::bad(name_missing(&field, &message), message)
            }
            other => ApiError::bad("task", other),
        })
    }
}

/// Start a rollout task as attempt 0.
#[utoipa::path(
    post,
    path = "/v1/rollouts",
    operation_id = "agent_submit",
    tag = "agent",
    request_body = RolloutTask,
    responses(
        (status = 202, description = "Started: the rollout id and attempt.", body = rollpoint_api::wire::RolloutStatus),
        (status = 400, description = rollpoint_api::error::doc::BAD_REQUEST, body = rollpoint_api::error::ErrorBody),
        (status = 401, description = rollpoint_api::error::doc::UNAUTHORIZED, body = rollpoint_api::error::ErrorBody),
        (status = 409, description = "The rollout id is already known here (`conflict`).", body = rollpoint_api::error::ErrorBody),
        (status = 413, description = rollpoint_api::error::doc::TOO_LARGE, body = rollpoint_api::error::ErrorBody),
        (status = 502, description = "The drivers failed (`failed`).", body = rollpoint_api::error::ErrorBody),
    ),
    security(("bearer" = [])),
)]
pub(super) async fn handle(
    State(shared): State<Arc<Shared>>,
    Body(task, _): Body<RolloutTask, ApiError, Task>,
) -> Result<Response, ApiError> {
    let status = shared.submit(task)?;
    Ok(json(StatusCode::ACCEPTED, &status))
}

/// A missing field is reported at its parent (`task..` for the top
/// level), its name only in the message: the path then names the field.
fn name_missing(field: &str, message: &str) -> String {
    let base = field.trim_end_matches('.');
    let missing = message
        .split("missing field `")
        .nth(1)
        .and_then(|rest| rest.split('`').next());
    match missing {
        Some(name) if !base.ends_with(name) => format!("{base}.{name}"),
        _ => base.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::name_missing;

    #[test]
    fn missing_fields_are_named_by_their_path() {
        let top = "rollout task: field `.`: missing field `adapter`";
        assert_eq!(name_missing("task..", top), "task.adapter");
        assert_eq!(
            name_missing("task.task", "missing field `id`"),
            "task.task.id"
        );
        assert_eq!(name_missing("task.v", "unknown version 2"), "task.v");
    }
}
