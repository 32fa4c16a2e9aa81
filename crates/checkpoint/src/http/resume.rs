//! `POST /v1/checkpoint/resume`: end or abort a checkpoint.

use axum::body::Body;
use axum::extract::State;
use axum::response::Response;

use super::{ApiError, Shared, body, json};
use crate::wire::ResumeRequest;

pub(super) async fn handle(State(control): Shared, raw: Body) -> Result<Response, ApiError> {
    let req: ResumeRequest = body(raw).await?;
    json(&control.resume(req).await?)
}
