//! Names that become path components (checkpoint ids, kinds, instances) and
//! attempt keys: checked once at the edge so nothing downstream can escape
//! the run directory or write an unreadable name.

use crate::errors::CallError;
use crate::participant::AttemptKey;

pub use rollpoint_proto::limits::MAX_NAME;

pub use rollpoint_proto::limits::name_problem;

/// Checks a name given in request field `field`.
pub fn check_name(field: &str, name: &str) -> Result<(), CallError> {
    match name_problem(name) {
        Some(problem) => Err(CallError::bad(field, format!("{name:?} {problem}"))),
        None => Ok(()),
    }
}

/// Checks attempt keys given in request field `field`: at least one when
/// `required`. Each key was already checked when it was decoded.
pub fn check_keys(field: &str, keys: &[AttemptKey], required: bool) -> Result<(), CallError> {
    if required && keys.is_empty() {
        return Err(CallError::bad(field, "must name at least one key"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_path_components() {
        for good in ["a", "ckpt-0001", "A.b_c-9"] {
            assert_eq!(name_problem(good), None, "{good}");
        }
        for bad in ["", ".", "..", "-x", "a/b", "a b", "é"] {
            assert!(name_problem(bad).is_some(), "{bad}");
        }
        assert!(name_problem(&"a".repeat(129)).is_some());
        assert_eq!(name_problem(&"a".repeat(128)), None);
    }

    #[test]
    fn keys_name_the_bad_index() {
        let err = crate::decode::decode_json::<crate::wire::KeysRequest>(
            br#"{"keys": ["ok", ""], "timeout_ms": 10}"#,
        )
        .expect_err("empty key");
        assert_eq!(err.field.as_deref(), Some("keys[1]"));
        let err = check_keys("keys", &[], true).expect_err("no keys");
        assert_eq!(err.field.as_deref(), Some("keys"));
        check_keys("scope", &[], false).expect("empty scope allowed");
    }
}
