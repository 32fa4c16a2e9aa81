//! `POST /v1/owner/sessions/{id}/snapshot` `{"checkpoint": ..}`: snapshot the
//! session's sandbox for a checkpoint; replies with the session record.

use axum::body::Body;
use axum::extract::{Path, State};
use axum::response::Response;

use super::wire::{ApiError, SnapshotBody, json};
use super::{Shared, read_body};
use crate::decode::decode_json;

pub(super) async fn handle(
    State(owner): Shared,
    Path(session): Path<String>,
    body: Body,
) -> Result<Response, ApiError> {
    let body: SnapshotBody = decode_json(&read_body(body).await?)?;
    json(&owner.snapshot(&session, &body.checkpoint).await?)
}
