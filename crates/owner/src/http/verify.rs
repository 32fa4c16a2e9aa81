//! `POST /v1/owner/sessions/{id}/verify`: grade the session, then end it.

use axum::extract::{Path, State};
use axum::response::Response;

use super::Shared;
use super::wire::{ApiError, json};

pub(super) async fn handle(
    State(owner): Shared,
    Path(session): Path<String>,
) -> Result<Response, ApiError> {
    json(&owner.verify(&session).await?)
}
