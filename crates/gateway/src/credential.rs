//! The upstream's credential, held by the gateway and never by a sandbox: read once from an
//! environment variable or a private file, sent on every upstream call in the header the API
//! family expects (`Authorization: Bearer` for OpenAI routes, `x-api-key` for Anthropic
//! Messages), after every key header the harness sent is dropped. Its `Debug` hides the value,
//! so it cannot reach a log by accident; it is never written to the ledger.

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;

use axum::http::{HeaderMap, HeaderName, HeaderValue, header};

use crate::conversation::Route;
use crate::errors::GatewayError;

/// Headers a harness may carry a key in; all are dropped when the gateway holds a credential.
const KEY_HEADERS: [&str; 3] = ["authorization", "x-api-key", "api-key"];

/// An upstream API key.
#[derive(Clone)]
pub struct Credential {
    key: String,
    /// Where it came from, for messages (`env OPENAI_API_KEY`, `file /path`).
    source: String,
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credential")
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

impl Credential {
    /// The key in environment variable `name` (set and not empty).
    pub fn from_env(name: &str) -> Result<Self, GatewayError> {
        let bad = |message: &str| GatewayError::Credential {
            origin: format!("env {name}"),
            message: message.to_owned(),
        };
        let key = std::env::var(name).map_err(|_| bad("is not set (or not UTF-8)"))?;
        Self::new(key.trim(), format!("env {name}"))
    }

    /// The key in `path`, which only its owner may read (mode 0600 or 0400).
    pub fn from_file(path: &Path) -> Result<Self, GatewayError> {
        let source = format!("file {}", path.display());
        let bad = |message: String| GatewayError::Credential {
            origin: source.clone(),
            message,
        };
        let meta = std::fs::metadata(path).map_err(|e| bad(e.to_string()))?;
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            return Err(bad(format!(
                "mode {mode:04o} lets others read it; make it 0600"
            )));
        }
        let key = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
        Self::new(key.trim(), source.clone())
    }

    /// The key a setting names: an environment variable, else a file, else none.
    pub fn named(env: Option<&str>, file: Option<&Path>) -> Result<Option<Self>, GatewayError> {
        match (env, file) {
            (Some(name), _) => Self::from_env(name).map(Some),
            (None, Some(path)) => Self::from_file(path).map(Some),
            (None, None) => Ok(None),
        }
    }

    fn new(key: &str, source: String) -> Result<Self, GatewayError> {
        if key.is_empty() {
            return Err(GatewayError::Credential {
                origin: source,
                message: "is empty".to_owned(),
            });
        }
        if HeaderValue::from_str(key).is_err() || key.contains(char::is_whitespace) {
            return Err(GatewayError::Credential {
                origin: source,
                message: "holds characters a header cannot carry".to_owned(),
            });
        }
        Ok(Self {
            key: key.to_owned(),
            source,
        })
    }

    /// Where the key came from.
    #[must_use]
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Drops every key header of `headers` and sets this credential in the one `route`'s API
    /// family reads.
    pub(crate) fn apply(&self, route: Route, headers: &mut HeaderMap) {
        for name in KEY_HEADERS {
            headers.remove(name);
        }
        let (name, value) = match route {
            Route::Messages => (HeaderName::from_static("x-api-key"), self.key.clone()),
            _ => (header::AUTHORIZATION, format!("Bearer {}", self.key)),
        };
        if let Ok(mut value) = HeaderValue::from_str(&value) {
            value.set_sensitive(true);
            headers.insert(name, value);
        }
    }
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;

    #[test]
    fn the_key_goes_in_the_family_s_header_and_the_harness_s_keys_are_dropped() {
        let c = Credential::new("sk-real", "test".to_owned()).unwrap();
        let mut h = HeaderMap::new();
        h.insert("authorization", HeaderValue::from_static("Bearer dummy"));
        h.insert("x-api-key", HeaderValue::from_static("dummy"));
        h.insert("api-key", HeaderValue::from_static("dummy"));
        c.apply(Route::Chat, &mut h);
        assert_eq!(h["authorization"], "Bearer sk-real");
        assert!(h.get("x-api-key").is_none() && h.get("api-key").is_none());
        let mut h = HeaderMap::new();
        h.insert("authorization", HeaderValue::from_static("Bearer dummy"));
        c.apply(Route::Messages, &mut h);
        assert_eq!(h["x-api-key"], "sk-real");
        assert!(h.get("authorization").is_none());
        assert!(!format!("{c:?}").contains("sk-real"), "Debug hides the key");
    }

    #[test]
    fn a_readable_file_or_an_empty_key_is_refused_by_source() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("key");
        std::fs::write(&p, "sk\n").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = Credential::from_file(&p).unwrap_err().to_string();
        assert!(
            e.contains("0644") && e.contains(&p.display().to_string()),
            "{e}"
        );
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(Credential::from_file(&p).unwrap().key, "sk");
        std::fs::write(&p, "\n").unwrap();
        let e = Credential::from_file(&p).unwrap_err().to_string();
        assert!(e.contains("empty"), "{e}");
        let e = Credential::from_env("ROLLPOINT_NO_SUCH_KEY_VAR")
            .unwrap_err()
            .to_string();
        assert!(e.contains("ROLLPOINT_NO_SUCH_KEY_VAR"), "{e}");
    }
}
