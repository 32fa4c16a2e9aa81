//! Decoding a versioned JSON document: the version is read first, so an
//! unknown version is named as such rather than as whatever field it
//! changed; then the document is decoded strictly, naming the field.

use std::path::Path;

use serde::de::DeserializeOwned;

use crate::errors::StoreError;

/// Decodes `bytes` (read from `path`) as a `T` of version `expected`.
pub(crate) fn decode<T: DeserializeOwned>(
    path: &Path,
    bytes: &[u8],
    expected: u32,
) -> Result<T, StoreError> {
    let json = |message: String| StoreError::Json {
        path: path.to_owned(),
        message,
    };
    let value: serde_json::Value =
        serde_json::from_slice(bytes).map_err(|e| json(e.to_string()))?;
    let version = value
        .get("version")
        .ok_or_else(|| json("missing field `version`".to_owned()))?;
    let found = version
        .as_u64()
        .and_then(|v| u32::try_from(v).ok())
        .ok_or_else(|| {
            json(format!(
                "field `version`: {version} is not a version number"
            ))
        })?;
    if found != expected {
        return Err(StoreError::Version {
            path: path.to_owned(),
            found,
            expected,
        });
    }
    serde_path_to_error::deserialize(value).map_err(|e| {
        let field = e.path().to_string();
        json(format!("field `{field}`: {}", e.into_inner()))
    })
}
