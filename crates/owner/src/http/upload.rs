//! `PUT /v1/owner/sessions/{id}/files?path=..&mode=..` (raw body): write a
//! file in the session's sandbox. `mode` is octal, default 644.

use axum::body::Body;
use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse as _, Response};

use super::wire::ApiError;
use super::{Shared, query, read_body};
use crate::errors::OwnerError;

const DEFAULT_MODE: u32 = 0o644;

/// Write a file in the session's sandbox.
#[utoipa::path(
    put,
    path = "/v1/owner/sessions/{id}/files",
    operation_id = "owner_upload",
    tag = "owner",
    params(
        ("id" = String, Path, description = "The session id."),
        ("path" = String, Query, description = "The file; a relative path is under the workdir."),
        ("mode" = Option<String>, Query, description = "Octal file mode (default 644)."),
    ),
    request_body(content(("application/octet-stream")), description = "The file's bytes."),
    responses(
        (status = 204, description = "Written."),
        super::SessionBodyErrors,
    ),
    security(("bearer" = [])),
)]
pub(super) async fn handle(
    State(owner): Shared,
    Path(session): Path<String>,
    RawQuery(raw): RawQuery,
    body: Body,
) -> Result<Response, ApiError> {
    let params = query(raw.as_deref(), &["path", "mode"])?;
    let path = params
        .get("path")
        .ok_or_else(|| OwnerError::bad("path", "missing query parameter"))?;
    let mode = match params.get("mode") {
        None => DEFAULT_MODE,
        Some(m) => u32::from_str_radix(m, 8)
            .map_err(|e| OwnerError::bad("mode", format!("{m:?} is not an octal mode: {e}")))?,
    };
    let bytes = read_body(body).await?;
    owner.upload(&session, path, bytes.to_vec(), mode).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}
