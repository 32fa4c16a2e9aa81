//! `GET /v1/owner/sessions/{id}/files?path=..&limit=..`: read a file of the
//! session's sandbox; the reply body is its bytes.

use axum::extract::{Path, RawQuery, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse as _, Response};

use super::wire::ApiError;
use super::{BODY_LIMIT, Shared, query};
use crate::errors::OwnerError;

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
