//! Sandbox and snapshot ids become directory and subvolume names, so they are
//! checked here once: no separators, no dot names, nothing a shell or a path
//! join could misread.

use crate::errors::Error;

/// Longest id accepted; leaves room under NAME_MAX for temporary prefixes.
const MAX_LEN: usize = rollpoint_proto::limits::MAX_STORE_ID;

/// Prefix of in-progress entries; never a valid id, so `list` skips them.
pub(crate) const PARTIAL_PREFIX: &str = ".partial-";

const _: () = assert!(MAX_LEN == 224, "check's message names the limit");

pub(crate) fn check(what: &'static str, id: &str) -> Result<(), Error> {
    let bad = |reason| {
        Err(Error::InvalidId {
            what,
            id: id.to_owned(),
            reason,
        })
    };
    if id.is_empty() {
        return bad("empty");
    }
    if id.len() > MAX_LEN {
        return bad("longer than 224 bytes");
    }
    if id.starts_with('.') || id.starts_with('-') {
        return bad("starts with '.' or '-'");
    }
    if !id.bytes().all(rollpoint_proto::limits::is_id_byte) {
        return bad("only ASCII letters, digits, '-', '_', '.' and '~' are allowed");
    }
    Ok(())
}

pub(crate) fn is_valid(id: &str) -> bool {
    check("any", id).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_plain_ids_and_rejects_path_tricks() {
        for ok in ["sb1", "ck-2.snap_3", "A"] {
            assert!(is_valid(ok), "{ok}");
        }
        for bad in ["", ".", "..", "a/b", ".partial-x", "-rf", "a b", "é"] {
            assert!(!is_valid(bad), "{bad}");
        }
        assert!(is_valid(&"x".repeat(224)));
        assert!(!is_valid(&"x".repeat(225)));
        let err = check("snapshot", "a/b").expect_err("slash is refused");
        assert!(err.to_string().contains("snapshot id \"a/b\""), "{err}");
    }
}
