//! Decoding request bodies with the offending field named by its full path
//! (`task.verify.timeout_s`), so a caller can fix a bad body without
//! guessing.

use serde::de::DeserializeOwned;

use crate::errors::OwnerError;

/// Decodes `bytes` as JSON into `T`; errors name the field path.
pub fn decode_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, OwnerError> {
    Ok(rollpoint_api::decode_json(bytes)?)
}

/// The full path of the field an error is about. serde reports a missing
/// field at its parent's path, with the name only in the message; the name
/// is appended here so the path always names the field itself.
pub fn field_path(prefix: &str, path: &str, err: &serde_json::Error) -> String {
    let inner = rollpoint_proto::field_path(path, err);
    match (prefix, inner.as_str()) {
        ("", _) => inner,
        (_, ".") => prefix.to_owned(),
        _ => format!("{prefix}.{inner}"),
    }
}
