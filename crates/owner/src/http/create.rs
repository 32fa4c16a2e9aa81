//! `POST /v1/owner/sessions` `{"task": ...}`: seed a session.

use axum::extract::State;
use axum::response::Response;

use super::Shared;
use super::body::Json;
use super::wire::{ApiError, CreateBody, json};
use rollpoint_api::Body;

/// Seed a session: a sandbox from the task's spec, its files, its setup.
#[utoipa::path(
    post,
    path = "/v1/owner/sessions",
    operation_id = "owner_create_session",
    tag = "owner",
    request_body = CreateBody,
    responses(
        (status = 200, description = "The seeded session.", body = crate::owner::SessionInfo),
        (status = 400, description = super::doc::BAD_REQUEST, body = super::wire::ErrorReply),
        (status = 401, description = super::doc::UNAUTHORIZED, body = super::wire::ErrorReply),
        (status = 413, description = super::doc::TOO_LARGE, body = super::wire::ErrorReply),
        (status = 422, description = super::doc::SETUP, body = super::wire::ErrorReply),
        (status = 500, description = super::doc::FAILED, body = super::wire::ErrorReply),
    ),
    security(("bearer" = [])),
)]
pub(super) async fn handle(
    State(owner): Shared,
    Body(body, _): Json<CreateBody>,
) -> Result<Response, ApiError> {
    json(&owner.create_session(body.task).await?)
}
