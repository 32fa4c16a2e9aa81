//! How the control routes take their bodies: the limit and error this
//! surface names once, so every route takes its body through
//! `rollpoint_api::Body` (a too-large body is a `too_large` 413, a bad field a
//! `bad_request` 400 naming it), decoded and then checked field by field.

use axum::body::Bytes;
use rollpoint_api::{Format, Surface, decode_json};
use serde::de::DeserializeOwned;

use crate::errors::CallError;
use crate::wire::Request;

/// Largest request body accepted.
pub const BODY_LIMIT: usize = 4 << 20;

impl Surface for CallError {
    const BODY_LIMIT: usize = BODY_LIMIT;
}

/// A request body of these routes: JSON, each field checked ([`Request`]).
pub(super) type Call<T> = rollpoint_api::Body<T, CallError, Checked>;

/// Decoded, then checked field by field.
#[derive(Debug)]
pub(super) struct Checked;

impl<T: DeserializeOwned + Request> Format<T, CallError> for Checked {
    fn decode(bytes: Bytes) -> Result<T, CallError> {
        let req: T = decode_json(&bytes)?;
        req.check()?;
        Ok(req)
    }
}
