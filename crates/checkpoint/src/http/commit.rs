//! `POST /v1/checkpoint/commit`: export and write the scope's records.

use axum::body::Body;
use axum::extract::State;
use axum::response::Response;

use super::{ApiError, Shared, body, json};
use crate::wire::CommitRequest;

pub(super) async fn handle(State(control): Shared, raw: Body) -> Result<Response, ApiError> {
    let req: CommitRequest = body(raw).await?;
    json(&control.commit(req).await?)
}
