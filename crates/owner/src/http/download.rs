//! `GET /v1/owner/sessions/{id}/files?path=..&limit=..`: read a file of the
//! session's sandbox; the reply body is its bytes.

use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse as _, Response};

use super::Shared;
use super::body::{BODY_LIMIT, FileParam, FileQuery, SessionId};
use super::wire::ApiError;
use crate::errors::OwnerError;

/// `?limit=`: most bytes to read, the body limit when absent.
#[derive(Debug)]
pub(super) struct Limit(u64);

impl FileParam for Limit {
    const NAME: &'static str = "limit";

    fn parse(value: Option<&str>) -> Result<Self, OwnerError> {
        match value {
            None => Ok(Self(BODY_LIMIT as u64)),
            Some(l) => l
                .parse::<u64>()
                .map(Self)
                .map_err(|e| OwnerError::bad("limit", format!("{l:?} is not a byte count: {e}"))),
        }
    }
}

/// Read a file of the session's sandbox.
#[utoipa::path(
    get,
    path = "/v1/owner/sessions/{id}/files",
    operation_id = "owner_download",
    tag = "owner",
    params(
        SessionId,
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
    Path(SessionId { id: session }): Path<SessionId>,
    query: FileQuery<Limit>,
) -> Result<Response, ApiError> {
    let Limit(limit) = query.param;
    let bytes = owner.download(&session, &query.path, limit).await?;
    Ok((
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/octet-stream")],
        bytes,
    )
        .into_response())
}
