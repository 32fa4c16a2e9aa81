//! Route secrets: what binds a model call to the attempt that made it.
//!
//! A sandbox reaches the gateway at `<gateway>/r/<key>@<secret>/...`, where
//! the secret is the HMAC-SHA256 of the attempt key under the run's route
//! key (32 random bytes, `RUN_DIR/gateway/route.key`), cut to 128 bits. The
//! gateway checks a call by recomputing it, so a key guessed or copied from
//! another rollout (its id is no secret) is refused; its only table of
//! secrets names the sender of a refused call. A new
//! attempt (a restore, a fork branch, a retry) has a new key and so a new
//! secret; the old attempt is fenced by the gateway's key registry.

use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

use crate::version::FormatError;

/// A route key file that cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum RouteKeyError {
    #[error(transparent)]
    Format(#[from] FormatError),
    #[error("route key: `key` must be 64 hex digits")]
    NotHex,
}

/// Version of the route key file.
pub const ROUTE_KEY_VERSION: u32 = 1;

/// Between the attempt key and its secret in a route segment. Never in a
/// rollout id, so the split is unambiguous.
pub const SEPARATOR: char = '@';

/// Hex digits of a secret (128 bits).
pub const SECRET_LEN: usize = 32;

/// The run's route key. `Debug` never shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct RouteKey([u8; 32]);

impl std::fmt::Debug for RouteKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RouteKey(..)")
    }
}

/// The route key file: `{"v": 1, "key": "<64 hex digits>"}`, mode 0600.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RouteKeyFile {
    v: u32,
    key: String,
}

impl RouteKey {
    /// A key from 32 bytes the caller drew from the system's random source.
    #[must_use]
    pub fn from_bytes(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }

    /// The file's text.
    #[must_use]
    pub fn encode(&self) -> String {
        let file = RouteKeyFile {
            v: ROUTE_KEY_VERSION,
            key: crate::hex::hex(&self.0),
        };
        serde_json::to_string(&file).unwrap_or_default()
    }

    /// Reads the file's text; an unknown version or a key that is not 64
    /// hex digits is refused by name.
    pub fn decode(text: &str) -> Result<Self, RouteKeyError> {
        let file: RouteKeyFile =
            crate::version::decode("route key", ROUTE_KEY_VERSION, text.as_bytes())?;
        unhex(&file.key).map(Self).ok_or(RouteKeyError::NotHex)
    }

    /// The secret of `attempt_key`: 32 lowercase hex digits.
    #[must_use]
    pub fn secret(&self, attempt_key: &str) -> String {
        let mut tag = self.mac(attempt_key).finalize().into_bytes();
        let cut = tag
            .get(..SECRET_LEN / 2)
            .map(crate::hex::hex)
            .unwrap_or_default();
        tag.iter_mut().for_each(|b| *b = 0);
        cut
    }

    /// Whether `secret` is `attempt_key`'s, compared in constant time.
    #[must_use]
    pub fn verify(&self, attempt_key: &str, secret: &str) -> bool {
        let Some(bytes) = unhex_any(secret).filter(|b| b.len() == SECRET_LEN / 2) else {
            return false;
        };
        self.mac(attempt_key).verify_truncated_left(&bytes).is_ok()
    }

    /// The route segment of `attempt_key`: `<key>@<secret>`.
    #[must_use]
    pub fn segment(&self, attempt_key: &str) -> String {
        format!("{attempt_key}{SEPARATOR}{}", self.secret(attempt_key))
    }

    fn mac(&self, attempt_key: &str) -> Hmac<Sha256> {
        // HMAC takes a key of any length: this never fails.
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&self.0)
            .unwrap_or_else(|_| unreachable!("HMAC accepts any key length"));
        mac.update(b"rollpoint-route-v1\0");
        mac.update(attempt_key.as_bytes());
        mac
    }
}

/// A route segment split into the attempt key and its secret, if it has one.
#[must_use]
pub fn split(segment: &str) -> (&str, Option<&str>) {
    match segment.split_once(SEPARATOR) {
        Some((key, secret)) => (key, Some(secret)),
        None => (segment, None),
    }
}

fn unhex_any(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

fn unhex(text: &str) -> Option<[u8; 32]> {
    unhex_any(text)?.try_into().ok()
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;

    #[test]
    fn secrets_bind_one_attempt_and_the_file_round_trips() {
        let key = RouteKey::from_bytes([7; 32]);
        let s = key.secret("task-1");
        assert_eq!(s.len(), SECRET_LEN);
        assert!(key.verify("task-1", &s));
        assert!(!key.verify("task-1-a1", &s), "another attempt's secret");
        assert!(!key.verify("task-2", &s));
        assert!(!key.verify("task-1", &s[..30]), "a shortened secret");
        assert!(!key.verify("task-1", "zz"));
        let other = RouteKey::from_bytes([8; 32]);
        assert!(!other.verify("task-1", &s), "another run's key");
        let segment = key.segment("a.b~1");
        let secret = key.secret("a.b~1");
        assert_eq!(split(&segment), ("a.b~1", Some(secret.as_str())));
        assert_eq!(split("plain"), ("plain", None));
        let back = RouteKey::decode(&key.encode()).unwrap();
        assert_eq!(back, key);
        assert!(!format!("{key:?}").contains("07"), "Debug hides the key");
        let err = RouteKey::decode(r#"{"v":2,"key":""}"#).unwrap_err();
        assert!(err.to_string().contains('2'), "{err}");
        let err = RouteKey::decode(r#"{"v":1,"key":"abc"}"#).unwrap_err();
        assert!(err.to_string().contains("64 hex"), "{err}");
    }
}
