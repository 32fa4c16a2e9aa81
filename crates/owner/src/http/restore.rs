//! `POST /v1/owner/restore` (a session record): fork the record's snapshot
//! into the session's new current sandbox.

use axum::body::Body;
use axum::extract::State;
use axum::response::Response;

use super::wire::{ApiError, json};
use super::{Shared, read_body};
use crate::record::SessionRecord;

pub(super) async fn handle(State(owner): Shared, body: Body) -> Result<Response, ApiError> {
    let record = SessionRecord::decode(&read_body(body).await?)?;
    json(&owner.restore(record).await?)
}
