//! Request bodies: read to a limit, then decoded with the offending field
//! named by its full path (`scope[2]`, `task.id`), so a caller can fix a bad
//! body without guessing.

use serde::de::DeserializeOwned;

/// A body that could not be decoded, and the path of the field at fault
/// (`.` for the body as a whole).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("field `{field}`: {message}")]
pub struct FieldError {
    pub field: String,
    pub message: String,
}

/// A body over its limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("request body is over the limit of {limit} bytes")]
pub struct TooLarge {
    pub limit: usize,
}

/// Reads `body` whole, refusing more than `limit` bytes.
pub async fn read_limited(
    body: axum::body::Body,
    limit: usize,
) -> Result<axum::body::Bytes, TooLarge> {
    axum::body::to_bytes(body, limit)
        .await
        .map_err(|_| TooLarge { limit })
}

/// Reads a request body of at most `limit` bytes and decodes it with
/// `decode`, refusing an oversized one with the surface's own 413 and a
/// malformed one with its own 400 naming the field. A route takes its body
/// through the extractor built on the same reading, `extract::Body`.
pub async fn read_with<T, E: From<TooLarge>>(
    body: axum::body::Body,
    limit: usize,
    decode: impl FnOnce(&[u8]) -> Result<T, E>,
) -> Result<T, E> {
    let bytes = read_limited(body, limit).await?;
    decode(&bytes)
}

/// Decodes `bytes` as one JSON value of type `T` (nothing may follow it);
/// errors name the field path.
pub fn decode_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, FieldError> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value: T = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        FieldError {
            field: rollpoint_proto::field_path(&path, &inner),
            message: inner.to_string(),
        }
    })?;
    de.end().map_err(|e| FieldError {
        field: ".".to_owned(),
        message: format!("trailing characters: {e}"),
    })?;
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Body {
        #[expect(dead_code, reason = "only decoding is tested")]
        keys: Vec<u32>,
    }

    #[test]
    fn names_the_field_and_refuses_trailing_bytes() {
        let err = decode_json::<Body>(br#"{"keys": [1, "x"]}"#).expect_err("bad");
        assert_eq!(err.field, "keys[1]");
        let err = decode_json::<Body>(br"{}").expect_err("missing");
        assert_eq!(err.field, "keys");
        let err = decode_json::<Body>(br#"{"keys": []} {}"#).expect_err("trailing");
        assert_eq!(err.field, ".");
        decode_json::<Body>(br#"{"keys": [1]}"#).expect("good");
    }
}
