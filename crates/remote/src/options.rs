//! A store's settings: the environment's `AWS_*` / `GOOGLE_*` / `AZURE_*` variables (read by
//! each store's builder), overlaid by an optional options file of `KEY=VALUE` lines (`#`
//! comments, blank lines) that only its owner may read. Values are secrets: `Debug` shows keys
//! only, and errors name a line number, never a value.

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

use crate::errors::RemoteError;

/// Store settings from an options file, in file order.
#[derive(Clone, Default)]
pub struct Options {
    pairs: Vec<(String, String)>,
    source: Option<PathBuf>,
}

impl std::fmt::Debug for Options {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let keys: Vec<&str> = self.pairs.iter().map(|(k, _)| k.as_str()).collect();
        f.debug_struct("Options")
            .field("source", &self.source)
            .field("keys", &keys)
            .finish()
    }
}

impl Options {
    /// No settings beyond the environment.
    pub fn none() -> Self {
        Self::default()
    }

    /// Reads `path`, which only its owner may read (mode 0600 or 0400).
    pub fn from_file(path: &Path) -> Result<Self, RemoteError> {
        let bad = |message: String| RemoteError::Options {
            path: path.to_owned(),
            message,
        };
        let meta = std::fs::metadata(path).map_err(|e| bad(e.to_string()))?;
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            return Err(bad(format!(
                "mode {mode:04o} lets others read it; make it 0600"
            )));
        }
        let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
        let mut pairs = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let Some((key, value)) = line.split_once('=') else {
                return Err(bad(format!("line {}: expected KEY=VALUE", n + 1)));
            };
            let key = key.trim();
            if key.is_empty() || !key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                return Err(bad(format!(
                    "line {}: the key must be letters, digits and _",
                    n + 1
                )));
            }
            pairs.push((key.to_ascii_lowercase(), value.trim().to_owned()));
        }
        Ok(Self {
            pairs,
            source: Some(path.to_owned()),
        })
    }

    pub(crate) fn pairs(&self) -> &[(String, String)] {
        &self.pairs
    }

    /// Where they came from, for messages.
    pub(crate) fn source(&self) -> Option<&Path> {
        self.source.as_deref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_pairs_and_refuses_an_open_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("store.env");
        std::fs::write(
            &path,
            "# s3\nAWS_ACCESS_KEY_ID = id\n\nAWS_SECRET_ACCESS_KEY=s3cr3t=x\n",
        )
        .expect("write");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        let e = Options::from_file(&path).expect_err("0644").to_string();
        assert!(e.contains("mode 0644"), "{e}");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        let o = Options::from_file(&path).expect("0600");
        assert_eq!(
            o.pairs(),
            [
                ("aws_access_key_id".to_owned(), "id".to_owned()),
                ("aws_secret_access_key".to_owned(), "s3cr3t=x".to_owned())
            ]
        );
        assert!(!format!("{o:?}").contains("s3cr3t"));
        std::fs::write(&path, "AWS_SECRET_ACCESS_KEY s3cr3t\n").expect("write");
        let e = Options::from_file(&path).expect_err("no =").to_string();
        assert!(e.contains("line 1") && !e.contains("s3cr3t"), "{e}");
    }
}
