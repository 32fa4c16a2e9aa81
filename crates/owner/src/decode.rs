//! Decoding request bodies with the offending field named by its full path
//! (`task.verify.timeout_s`), so a caller can fix a bad body without
//! guessing.

use serde::de::DeserializeOwned;

use crate::errors::OwnerError;

/// Decodes `bytes` as JSON into `T`; errors name the field path.
pub fn decode_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, OwnerError> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value: T = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        OwnerError::bad(field_path("", &path, &inner), inner.to_string())
    })?;
    de.end()
        .map_err(|e| OwnerError::bad(".", format!("trailing characters: {e}")))?;
    Ok(value)
}

/// The full path of the field an error is about. serde reports a missing
/// field at its parent's path, with the name only in the message; the name
/// is appended here so the path always names the field itself.
pub fn field_path(prefix: &str, path: &str, err: &serde_json::Error) -> String {
    let mut full = String::from(prefix);
    if path != "." {
        if !full.is_empty() {
            full.push('.');
        }
        full.push_str(path);
    }
    let msg = err.to_string();
    if let Some(name) = msg
        .strip_prefix("missing field `")
        .and_then(|rest| rest.split('`').next())
    {
        if !full.is_empty() {
            full.push('.');
        }
        full.push_str(name);
    }
    if full.is_empty() {
        ".".to_owned()
    } else {
        full
    }
}
