//! The one reader of versioned envelopes: the version field is read first,
//! so an unknown version is reported as such rather than as a missing field,
//! then the document is decoded strictly, naming the field. Wire formats and
//! the supervisor's files call the field `v`; the checkpoint store's files
//! call it `version` (kept, so published checkpoints stay readable).

use serde::de::DeserializeOwned;

/// A format could not be read.
#[derive(Debug, thiserror::Error)]
pub enum FormatError {
    #[error("{what}: not valid JSON: {source}")]
    Json {
        what: &'static str,
        source: serde_json::Error,
    },
    #[error("{what}: field `{field}` is missing or not an integer")]
    MissingVersion {
        what: &'static str,
        field: &'static str,
    },
    #[error("{what}: unknown version {found} (this build reads version {supported})")]
    UnknownVersion {
        what: &'static str,
        found: u64,
        supported: u32,
    },
    #[error("{what}: field `{path}`: {source}")]
    Field {
        what: &'static str,
        path: String,
        source: serde_json::Error,
    },
}

/// The path of a field error as `serde_path_to_error` gives it (`.` for the
/// top level), naming a missing field itself: serde reports it at its
/// parent's path, with its name only in the message.
pub fn field_path(path: &str, err: &serde_json::Error) -> String {
    let message = err.to_string();
    let missing = message
        .strip_prefix("missing field `")
        .and_then(|rest| rest.split('`').next());
    match (path, missing) {
        (".", Some(name)) => name.to_owned(),
        (_, Some(name)) => format!("{path}.{name}"),
        _ => path.to_owned(),
    }
}

/// Decodes `bytes` as the format `what` at version `supported`, checking the
/// version field `v` before any other field.
pub fn decode<T: DeserializeOwned>(
    what: &'static str,
    supported: u32,
    bytes: &[u8],
) -> Result<T, FormatError> {
    decode_versioned(what, "v", supported, bytes)
}

/// [`decode`] for a format read at any version from `oldest` to `current`
/// (the caller upgrades an older document after reading it).
pub fn decode_since<T: DeserializeOwned>(
    what: &'static str,
    oldest: u32,
    current: u32,
    bytes: &[u8],
) -> Result<T, FormatError> {
    let value: serde_json::Value =
        serde_json::from_slice(bytes).map_err(|source| FormatError::Json { what, source })?;
    let found = value
        .get("v")
        .and_then(serde_json::Value::as_u64)
        .ok_or(FormatError::MissingVersion { what, field: "v" })?;
    if !(u64::from(oldest)..=u64::from(current)).contains(&found) {
        return Err(FormatError::UnknownVersion {
            what,
            found,
            supported: current,
        });
    }
    serde_path_to_error::deserialize(value).map_err(|e| FormatError::Field {
        what,
        path: e.path().to_string(),
        source: e.into_inner(),
    })
}

/// [`decode`] for a format whose version lives in field `field`.
pub fn decode_versioned<T: DeserializeOwned>(
    what: &'static str,
    field: &'static str,
    supported: u32,
    bytes: &[u8],
) -> Result<T, FormatError> {
    let value: serde_json::Value =
        serde_json::from_slice(bytes).map_err(|source| FormatError::Json { what, source })?;
    check_version(&value, what, field, supported)?;
    serde_path_to_error::deserialize(value).map_err(|e| FormatError::Field {
        what,
        path: e.path().to_string(),
        source: e.into_inner(),
    })
}

/// The envelope check alone, for a reader that inspects the document
/// between the version and the strict decode: `value[field]` must be the
/// integer `supported`.
pub fn check_version(
    value: &serde_json::Value,
    what: &'static str,
    field: &'static str,
    supported: u32,
) -> Result<(), FormatError> {
    let found = value
        .get(field)
        .and_then(serde_json::Value::as_u64)
        .ok_or(FormatError::MissingVersion { what, field })?;
    if found != u64::from(supported) {
        return Err(FormatError::UnknownVersion {
            what,
            found,
            supported,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Probe {
        #[expect(dead_code, reason = "read only to check the version is accepted")]
        v: u32,
        name: String,
    }

    #[test]
    fn accepts_current_version() {
        let p: Probe = decode("probe", 1, br#"{"v":1,"name":"a"}"#).expect("decodes");
        assert_eq!(p.name, "a");
    }

    #[test]
    fn rejects_unknown_version_by_name() {
        let err = decode::<Probe>("probe", 1, br#"{"v":2,"name":"a"}"#).expect_err("v2");
        assert_eq!(
            err.to_string(),
            "probe: unknown version 2 (this build reads version 1)"
        );
    }

    #[test]
    fn names_the_bad_field() {
        let err = decode::<Probe>("probe", 1, br#"{"v":1,"name":3}"#).expect_err("bad");
        assert!(err.to_string().contains("name"), "{err}");
        let err = decode::<Probe>("probe", 1, br#"{"v":1,"name":"a","x":1}"#).expect_err("x");
        assert!(err.to_string().contains("unknown field `x`"), "{err}");
        let err = decode::<Probe>("probe", 1, br#"{"name":"a"}"#).expect_err("no v");
        assert!(matches!(err, FormatError::MissingVersion { .. }));
    }

    #[test]
    fn a_missing_field_is_named_by_its_own_path() {
        #[derive(Debug, serde::Deserialize)]
        struct Inner {
            #[expect(dead_code, reason = "only its absence is tested")]
            id: String,
        }
        #[derive(Debug, serde::Deserialize)]
        struct Outer {
            #[expect(dead_code, reason = "only its absence is tested")]
            task: Inner,
        }
        let path = |json: &str| {
            let err = serde_path_to_error::deserialize::<_, Outer>(
                &mut serde_json::Deserializer::from_str(json),
            )
            .expect_err("invalid");
            field_path(&err.path().to_string(), err.inner())
        };
        assert_eq!(path("{}"), "task");
        assert_eq!(path(r#"{"task": {}}"#), "task.id");
        assert_eq!(path(r#"{"task": {"id": 3}}"#), "task.id");
    }
}
