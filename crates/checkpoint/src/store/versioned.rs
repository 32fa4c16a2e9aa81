//! Decoding a checkpoint store document through the one versioned-envelope
//! reader ([`rollpoint_proto::decode_versioned`]): the version (field
//! `version` in these files) is read first, so an unknown version is named as
//! such, then the document is decoded strictly, naming the field.

use std::path::Path;

use rollpoint_proto::FormatError;
use serde::de::DeserializeOwned;

use crate::errors::StoreError;

/// The version field of every store document.
const VERSION_FIELD: &str = "version";

/// Decodes `bytes` (read from `path`) as a `T` of version `expected`.
pub(crate) fn decode<T: DeserializeOwned>(
    path: &Path,
    bytes: &[u8],
    expected: u32,
) -> Result<T, StoreError> {
    rollpoint_proto::decode_versioned("checkpoint store file", VERSION_FIELD, expected, bytes)
        .map_err(|e| match e {
            FormatError::UnknownVersion { found, .. } => StoreError::Version {
                path: path.to_owned(),
                found: u32::try_from(found).unwrap_or(u32::MAX),
                expected,
            },
            FormatError::MissingVersion { field, .. } => StoreError::json(
                path.to_owned(),
                format!("field `{field}` is missing or not a version number"),
            ),
            FormatError::Json { source, .. } => {
                StoreError::json(path.to_owned(), source.to_string())
            }
            FormatError::Field {
                path: field,
                source,
                ..
            } => StoreError::json(path.to_owned(), format!("field `{field}`: {source}")),
        })
}
