//! `GET /v1/checkpoint/status`: kind, instance, phase, active checkpoint,
//! lease and readiness.

use axum::extract::State;
use axum::response::Response;

use super::{ApiError, Shared, json};

pub(super) async fn handle(State(control): Shared) -> Result<Response, ApiError> {
    json(&control.status().await?)
}
