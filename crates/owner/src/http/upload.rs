//! `PUT /v1/owner/sessions/{id}/files?path=..&mode=..` (raw body): write a
//! file in the session's sandbox. `mode` is octal, default 644.

use axum::extract::{Path, State};
use axum::response::Response;

use super::Shared;
use super::body::{File, FileParam, FileQuery, SessionId};
use super::wire::{ApiError, no_content};
use crate::errors::OwnerError;
use rollpoint_api::Body;

const DEFAULT_MODE: u32 = 0o644;

/// `?mode=`: the file's mode, octal.
#[derive(Debug)]
pub(super) struct Mode(u32);

impl FileParam for Mode {
    const NAME: &'static str = "mode";

    fn parse(value: Option<&str>) -> Result<Self, OwnerError> {
        match value {
            None => Ok(Self(DEFAULT_MODE)),
            Some(m) => u32::from_str_radix(m, 8)
                .map(Self)
                .map_err(|e| OwnerError::bad("mode", format!("{m:?} is not an octal mode: {e}"))),
        }
    }
}

/// Write a file in the session's sandbox.
#[utoipa::path(
    put,
    path = "/v1/owner/sessions/{id}/files",
    operation_id = "owner_upload",
    tag = "owner",
    params(
        SessionId,
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
    Path(SessionId { id: session }): Path<SessionId>,
    query: FileQuery<Mode>,
    Body(bytes, _): File,
) -> Result<Response, ApiError> {
    let Mode(mode) = query.param;
    owner
        .upload(&session, &query.path, bytes.to_vec(), mode)
        .await?;
    no_content()
}
