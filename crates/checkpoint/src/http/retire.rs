//! `POST /v1/checkpoint/retire`: stop and refuse attempts.

use axum::body::Body;
use axum::extract::State;
use axum::response::Response;

use super::{ApiError, Shared, body, json};
use crate::wire::KeysRequest;

pub(super) async fn handle(State(control): Shared, raw: Body) -> Result<Response, ApiError> {
    let req: KeysRequest = body(raw).await?;
    json(&control.retire(req).await?)
}
