//! `GET /v1/owner/sessions/{id}/files?path=..&limit=..`: read a file of the
//! session's sandbox; the reply body is its bytes.

use axum::extract::{Path, RawQuery, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse as _, Response};

use super::wire::ApiError;
use super::{BODY_LIMIT, Shared, query};
use crate::errors::OwnerError;

/// Read a file of the session's sandbox.
#[utoipa::path(
    get,
    path = "/v1/owner/sessions/{id}/files",
    operation_id = "owner_download",
    tag = "owner",
    params(
        ("id" = String, Path, description = "The session id."),
        ("path" = String, Query, description = "The file; a relative path is under the workdir."),
        ("limit" = Option<u64>, Query, description = "Most bytes to read (default: the body limit)."),
    ),
    responses(
        (status = 200, description = "The file's bytes.", content_type = "application/octet-stream"),
        (status = 400, description = super::doc::BAD_REQUEST, body = super::wire::ErrorReply),
        (status = 422, description = super::doc::UNPROCESSABLE, body = super::wire::ErrorReply),
        super::SessionErrors,
    ),
    security(("bearer" = [])),
)]
pub(super) async fn handle(
    State(owner): Shared,
    Path(session): Path<String>,
    RawQuery(raw): RawQuery,
) -> Result<Response, ApiError> {
    let params = query(raw.as_deref(), &["path", "limit"])?;
    let path = params
        .get("path")
        .ok_or_else(|| OwnerError::bad("path", "missing query parameter"))?;
    let limit = match params.get("limit") {
        None => BODY_LIMIT as u64,
        Some(l) => l
            .parse::<u64>()
            .map_err(|e| OwnerError::bad("limit", format!("{l:?} is not a byte count: {e}")))?,
    };
    let bytes = owner.download(&session, path, limit).await?;
    Ok((
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/octet-stream")],
        bytes,
    )
        .into_response())
}
