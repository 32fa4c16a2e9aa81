//! `POST /v1/checkpoint/forget`: drop what is remembered of rollouts.

use axum::body::Body;
use axum::extract::State;
use axum::response::Response;

use super::{ApiError, Shared, body, json};
use crate::wire::KeysRequest;

pub(super) async fn handle(State(control): Shared, raw: Body) -> Result<Response, ApiError> {
    let req: KeysRequest = body(raw).await?;
    json(&control.forget(req).await?)
}
