//! Decoding request and reply bodies with the offending field named by its
//! full path (`scope[2]`, `timeout_ms`), so a caller can fix a bad body
//! without guessing.

use serde::de::DeserializeOwned;

use crate::errors::CallError;

/// Decodes `bytes` as JSON into `T`; errors name the field path.
pub fn decode_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, CallError> {
    Ok(rollpoint_api::decode_json(bytes)?)
}
