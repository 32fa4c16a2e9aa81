//! Names that become path components (checkpoint ids, kinds, instances) and
//! attempt keys: checked once at the edge so nothing downstream can escape
//! the run directory or write an unreadable name.

use crate::errors::ControlError;

/// Longest checkpoint id or instance name.
pub const MAX_NAME: usize = 128;
/// Longest attempt key.
pub const MAX_KEY: usize = 256;

/// Why `name` is not a path component (`^[A-Za-z0-9][A-Za-z0-9._-]*$`, at
/// most [`MAX_NAME`] bytes), if it is not.
pub fn name_problem(name: &str) -> Option<&'static str> {
    let mut bytes = name.bytes();
    match bytes.next() {
        None => return Some("is empty"),
        Some(b) if !b.is_ascii_alphanumeric() => {
            return Some("must start with a letter or digit");
        }
        Some(_) => {}
    }
    if name.len() > MAX_NAME {
        return Some("is longer than 128 bytes");
    }
    if !bytes.all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-')) {
        return Some("may hold only letters, digits, '.', '_' and '-'");
    }
    None
}

/// Checks a name given in request field `field`.
pub fn check_name(field: &str, name: &str) -> Result<(), ControlError> {
    match name_problem(name) {
        Some(problem) => Err(ControlError::bad(field, format!("{name:?} {problem}"))),
        None => Ok(()),
    }
}

/// Checks attempt keys given in request field `field`: at least one when
/// `required`, each non-empty, printable and at most [`MAX_KEY`] bytes.
pub fn check_keys(field: &str, keys: &[String], required: bool) -> Result<(), ControlError> {
    if required && keys.is_empty() {
        return Err(ControlError::bad(field, "must name at least one key"));
    }
    for (i, key) in keys.iter().enumerate() {
        let problem = if key.is_empty() {
            Some("is empty")
        } else if key.len() > MAX_KEY {
            Some("is longer than 256 bytes")
        } else if key.chars().any(char::is_control) {
            Some("holds a control character")
        } else {
            None
        };
        if let Some(problem) = problem {
            return Err(ControlError::bad(
                format!("{field}[{i}]"),
                format!("{key:?} {problem}"),
            ));
        }
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
        let err = check_keys("keys", &["ok".into(), String::new()], true).expect_err("empty key");
        assert_eq!(err.field.as_deref(), Some("keys[1]"));
        let err = check_keys("keys", &[], true).expect_err("no keys");
        assert_eq!(err.field.as_deref(), Some("keys"));
        check_keys("scope", &[], false).expect("empty scope allowed");
    }
}
