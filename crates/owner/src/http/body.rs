//! How the owner's routes take their input: the session of a session route
//! (its `{id}`, described once), the body limit and error the owner names
//! once as its surface, so every route takes its body through
//! `rollpoint_api::Body` (a too-large body is the owner's 413 with `limit`, a
//! bad field its 400 naming the field), and the query of the file routes,
//! read before the body.

use std::collections::HashMap;

use axum::body::Bytes;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use rollpoint_api::{Format, Raw, Surface};

use crate::errors::OwnerError;
use crate::owner::SessionLaunch;
use crate::record::SessionRecord;

use super::wire::{ApiError, LaunchesBody};

/// The `{id}` of a session route: `Path(SessionId { id })`, and
/// `params(SessionId)` in its OpenAPI description.
#[derive(Debug, serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
pub(super) struct SessionId {
    /// The session id.
    pub id: String,
}

/// Largest request body accepted (a task with its files, an upload).
pub const BODY_LIMIT: usize = 64 << 20;

impl Surface for OwnerError {
    const BODY_LIMIT: usize = BODY_LIMIT;
}

/// A JSON body of an owner route.
pub(super) type Json<T> = rollpoint_api::Body<T, OwnerError>;

/// A file's bytes, as they are.
pub(super) type File = rollpoint_api::Body<Bytes, OwnerError, Raw>;

/// A session record, its version checked first ([`SessionRecord::decode`]).
pub(super) type Record = rollpoint_api::Body<SessionRecord, OwnerError, RecordFormat>;

/// The launches of a batched pause or continue, checked
/// ([`LaunchesBody::checked`]).
pub(super) type Launches = rollpoint_api::Body<Vec<SessionLaunch>, OwnerError, LaunchesFormat>;

#[derive(Debug)]
pub(super) struct LaunchesFormat;

impl Format<Vec<SessionLaunch>, OwnerError> for LaunchesFormat {
    fn decode(bytes: Bytes) -> Result<Vec<SessionLaunch>, OwnerError> {
        rollpoint_api::decode_json::<LaunchesBody>(&bytes)?.checked()
    }
}

#[derive(Debug)]
pub(super) struct RecordFormat;

impl Format<SessionRecord, OwnerError> for RecordFormat {
    fn decode(bytes: Bytes) -> Result<SessionRecord, OwnerError> {
        SessionRecord::decode(&bytes)
    }
}

/// Query parameters, each at most once and each one of `allowed`.
fn query(raw: Option<&str>, allowed: &[&str]) -> Result<HashMap<String, String>, OwnerError> {
    rollpoint_api::query::params(raw, allowed)
        .map_err(|(name, message)| OwnerError::bad(name, message))
}

/// The second parameter of a file route, beside `path`.
pub(super) trait FileParam: Sized {
    const NAME: &'static str;
    /// The parameter as given, or its default when absent.
    fn parse(value: Option<&str>) -> Result<Self, OwnerError>;
}

/// `?path=..` of a file route and its other parameter `P`.
#[derive(Debug)]
pub(super) struct FileQuery<P> {
    pub path: String,
    pub param: P,
}

impl<S: Send + Sync, P: FileParam> FromRequestParts<S> for FileQuery<P> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, ApiError> {
        let mut params = query(parts.uri.query(), &["path", P::NAME])?;
        let path = params
            .remove("path")
            .ok_or_else(|| OwnerError::bad("path", "missing query parameter"))?;
        let param = P::parse(params.get(P::NAME).map(String::as_str))?;
        Ok(Self { path, param })
    }
}
