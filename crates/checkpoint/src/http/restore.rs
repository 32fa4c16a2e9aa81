//! `POST /v1/checkpoint/restore`: install a published checkpoint's records as next attempts.

use axum::body::Body;
use axum::extract::State;
use axum::response::Response;

use super::{ApiError, Shared, body, json};
use crate::wire::RestoreRequest;

pub(super) async fn handle(State(control): Shared, raw: Body) -> Result<Response, ApiError> {
    let req: RestoreRequest = body(raw).await?;
    json(&control.restore(req).await?)
}
