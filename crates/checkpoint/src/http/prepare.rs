//! `POST /v1/checkpoint/prepare`: close admission and wait for a cut.

use axum::body::Body;
use axum::extract::State;
use axum::response::Response;

use super::{ApiError, Shared, body, json};
use crate::wire::PrepareRequest;

pub(super) async fn handle(State(control): Shared, raw: Body) -> Result<Response, ApiError> {
    let req: PrepareRequest = body(raw).await?;
    json(&control.prepare(req).await?)
}
