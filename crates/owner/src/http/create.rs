//! `POST /v1/owner/sessions` `{"task": ...}`: seed a session.

use axum::body::Body;
use axum::extract::State;
use axum::response::Response;

use super::wire::{ApiError, CreateBody, json};
use super::{Shared, read_body};
use crate::decode::decode_json;

pub(super) async fn handle(State(owner): Shared, body: Body) -> Result<Response, ApiError> {
    let body: CreateBody = decode_json(&read_body(body).await?)?;
    json(&owner.create_session(body.task).await?)
}
