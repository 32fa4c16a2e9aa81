//! The `edit` tool: exact string replacement. The text to replace must occur exactly once (or
//! `replace_all` is set), so an edit never lands somewhere the model did not mean.

use serde::Deserialize;

use super::{Outcome, ToolContext};
use crate::transcript::ToolStatus;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Args {
    pub path: String,
    pub old_string: String,
    pub new_string: String,
    #[serde(default)]
    pub replace_all: bool,
}

/// Replaces `old` by `new` in `text`; returns the new text and the number of replacements.
pub fn replace_exact(
    text: &str,
    old: &str,
    new: &str,
    all: bool,
) -> Result<(String, usize), String> {
    if old.is_empty() {
        return Err("old_string is empty".to_owned());
    }
    let count = text.matches(old).count();
    match count {
        0 => Err("old_string not found".to_owned()),
        1 => Ok((text.replacen(old, new, 1), 1)),
        n if all => Ok((text.replace(old, new), n)),
        n => Err(format!(
            "old_string occurs {n} times; add context to make it unique or set replace_all"
        )),
    }
}

pub fn run(args: &Args, ctx: &ToolContext) -> Outcome {
    let path = ctx.resolve(&args.path);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) => return Outcome::error(format!("cannot read {}: {e}", path.display())),
    };
    match replace_exact(&text, &args.old_string, &args.new_string, args.replace_all) {
        Ok((new_text, n)) => match std::fs::write(&path, new_text) {
            Ok(()) => Outcome {
                content: format!("replaced {n} occurrence(s) in {}", path.display()),
                status: ToolStatus::Ok,
                exit_code: None,
                truncated_bytes: 0,
            },
            Err(e) => Outcome::error(format!("cannot write {}: {e}", path.display())),
        },
        Err(e) => Outcome::error(format!("{}: {e}", path.display())),
    }
}

#[cfg(test)]
#[expect(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn replaces_only_unique_or_all() {
        assert_eq!(replace_exact("a b a", "b", "c", false).unwrap().0, "a c a");
        assert!(replace_exact("a b a", "a", "c", false).is_err());
        assert_eq!(
            replace_exact("a b a", "a", "c", true).unwrap(),
            ("c b c".to_owned(), 2)
        );
        assert!(replace_exact("abc", "x", "y", false).is_err());
        assert!(replace_exact("abc", "", "y", true).is_err());
    }
}
