//! Decoding request and reply bodies with the offending field named by its
//! full path (`scope[2]`, `timeout_ms`), so a caller can fix a bad body
//! without guessing.

use serde::de::DeserializeOwned;

use crate::errors::ControlError;

/// Decodes `bytes` as JSON into `T`; errors name the field path.
pub fn decode_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ControlError> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value: T = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        ControlError::bad(rollpoint_proto::field_path(&path, &inner), inner)
    })?;
    de.end()
        .map_err(|e| ControlError::bad(".", format!("trailing characters: {e}")))?;
    Ok(value)
}
