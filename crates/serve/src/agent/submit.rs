//! `POST /v1/rollouts`: a `RolloutTask` v1 starts as attempt 0. 202 with
//! the rollout id and attempt; 409 when the id is known here; 400 naming
//! the field of a bad task.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use rollpoint_driver::{DriverError, RolloutTask};

use super::Shared;
use crate::http::{ApiError, bytes, json};

pub(super) async fn handle(
    State(shared): State<Arc<Shared>>,
    body: Body,
) -> Result<Response, ApiError> {
    let bytes = bytes(body).await?;
    let task = RolloutTask::decode(&bytes).map_err(|e| match e {
        DriverError::Task { field, message } => ApiError::bad(field, message),
        other => ApiError::bad("task", other),
    })?;
    let status = shared.submit(task)?;
    Ok(json(StatusCode::ACCEPTED, &status))
}
