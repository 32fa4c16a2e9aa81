//! Attempt keys: `<rollout_id>` for attempt 0, `<rollout_id>-a<N>` for attempt N >= 1.
//! A rollout id may not itself end in `-a<digits>`, so the mapping is one-to-one. The
//! gateway's capture keys, the checkpoint records and the owner's sessions all name an
//! attempt this way.

use std::fmt;

/// A key that is not a valid attempt key, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("attempt key `{key}` is malformed: {reason}")]
pub struct KeyError {
    pub key: String,
    pub reason: &'static str,
}

/// A parsed attempt key.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AttemptKey {
    pub rollout: String,
    pub attempt: u32,
}

const MAX_LEN: usize = 128;

impl AttemptKey {
    /// The key of `attempt` of `rollout`; fails if the rollout id is not a valid one.
    pub fn new(rollout: &str, attempt: u32) -> Result<Self, KeyError> {
        check_rollout(rollout).map_err(|reason| KeyError {
            key: rollout.to_owned(),
            reason,
        })?;
        Ok(Self {
            rollout: rollout.to_owned(),
            attempt,
        })
    }

    /// Parses a key as it appears in `/r/<key>/...`.
    pub fn parse(key: &str) -> Result<Self, KeyError> {
        let bad = |reason| KeyError {
            key: key.to_owned(),
            reason,
        };
        if let Some((rollout, n)) = split_attempt(key) {
            let attempt: u32 = n.parse().map_err(|_| bad("attempt number out of range"))?;
            if attempt == 0 || n.starts_with('0') {
                return Err(bad(
                    "attempt suffix must be -a1, -a2, ... without leading zeros",
                ));
            }
            check_rollout(rollout).map_err(bad)?;
            Ok(Self {
                rollout: rollout.to_owned(),
                attempt,
            })
        } else {
            check_rollout(key).map_err(bad)?;
            Ok(Self {
                rollout: key.to_owned(),
                attempt: 0,
            })
        }
    }

    /// The key of this rollout's next attempt.
    #[must_use]
    pub fn next(&self) -> Self {
        Self {
            rollout: self.rollout.clone(),
            attempt: self.attempt.saturating_add(1),
        }
    }
}

impl fmt::Display for AttemptKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.attempt == 0 {
            f.write_str(&self.rollout)
        } else {
            write!(f, "{}-a{}", self.rollout, self.attempt)
        }
    }
}

fn split_attempt(key: &str) -> Option<(&str, &str)> {
    let (rollout, n) = key.rsplit_once("-a")?;
    (!n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())).then_some((rollout, n))
}

fn check_rollout(rollout: &str) -> Result<(), &'static str> {
    if rollout.is_empty() {
        return Err("rollout id is empty");
    }
    if rollout.len() > MAX_LEN {
        return Err("rollout id is longer than 128 bytes");
    }
    if !rollout
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
    {
        return Err("rollout id may hold only ASCII letters, digits, `_`, `.` and `-`");
    }
    if split_attempt(rollout).is_some() {
        return Err("rollout id may not end in -a<digits>");
    }
    Ok(())
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        for (key, rollout, attempt) in [
            ("r7", "r7", 0),
            ("r7-a2", "r7", 2),
            ("task-1.x-a10", "task-1.x", 10),
        ] {
            let k = AttemptKey::parse(key).unwrap();
            assert_eq!((k.rollout.as_str(), k.attempt), (rollout, attempt));
            assert_eq!(k.to_string(), key);
        }
    }

    #[test]
    fn rejects_bad_keys() {
        for key in ["", "r7-a0", "r7-a01", "a b", "r-a1-a2", "r7-a99999999999"] {
            assert!(AttemptKey::parse(key).is_err(), "{key} accepted");
        }
        assert!(AttemptKey::new("x-a3", 1).is_err());
    }
}
