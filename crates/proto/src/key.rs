//! Rollout ids and attempt keys, the names every participant gives an attempt.
//!
//! An attempt key is `<rollout_id>` for attempt 0 and `<rollout_id>-a<N>` for
//! attempt N >= 1. A [`RolloutId`] can only be made from a string that does not
//! itself end in `-a<digits>`, so no rollout id reads as another's attempt and
//! the encoding is one-to-one by construction. Keys are formatted and parsed
//! here and nowhere else: everything beyond this module holds [`AttemptKey`].

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::limits::{MAX_ATTEMPT_KEY, MAX_ROLLOUT_ID};

/// A string that is not a valid rollout id or attempt key, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what} `{key}` is malformed: {reason}")]
pub struct KeyError {
    pub what: &'static str,
    pub key: String,
    pub reason: String,
}

/// A rollout id: 1 to [`MAX_ROLLOUT_ID`] bytes of ASCII letters, digits, `_`,
/// `.`, `-` and `~`, not starting with `.` or `~` and not ending in `-a<digits>`.
/// `<rollout>~<n>` names branch `n` of a forked rollout.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RolloutId(String);

impl RolloutId {
    /// Checks `id`.
    pub fn new(id: &str) -> Result<Self, KeyError> {
        rollout_problem(id).map_or_else(
            || Ok(Self(id.to_owned())),
            |reason| {
                Err(KeyError {
                    what: "rollout id",
                    key: id.to_owned(),
                    reason,
                })
            },
        )
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Branch `n` (1-based) of this rollout: `<rollout>~<n>`.
    pub fn branch(&self, n: u32) -> Result<Self, KeyError> {
        Self::new(&format!("{}~{n}", self.0))
    }

    /// The first `n` branches of this rollout whose ids `taken` does not hold, lowest
    /// numbers first.
    pub fn free_branches(
        &self,
        n: usize,
        mut taken: impl FnMut(&Self) -> bool,
    ) -> Result<Vec<Self>, KeyError> {
        let mut out = Vec::with_capacity(n);
        let mut i: u32 = 1;
        while out.len() < n {
            let b = self.branch(i)?;
            if !taken(&b) {
                out.push(b);
            }
            i = i.checked_add(1).ok_or_else(|| KeyError {
                what: "rollout id",
                key: self.0.clone(),
                reason: "no branch number left".to_owned(),
            })?;
        }
        Ok(out)
    }

    /// The rollout this one is branch `n` of, when it is named `<rollout>~<n>`.
    #[must_use]
    pub fn branch_of(&self) -> Option<(Self, u32)> {
        let (base, n) = self.0.rsplit_once('~')?;
        if n.is_empty() || n.starts_with('0') || !n.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        Some((Self(base.to_owned()), n.parse().ok()?))
    }
}

impl fmt::Display for RolloutId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for RolloutId {
    type Err = KeyError;
    fn from_str(s: &str) -> Result<Self, KeyError> {
        Self::new(s)
    }
}

impl AsRef<str> for RolloutId {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

/// One attempt of one rollout. Sorts by rollout, then attempt.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AttemptKey {
    rollout: RolloutId,
    attempt: u32,
}

impl AttemptKey {
    /// The key of `attempt` of `rollout`.
    pub fn new(rollout: RolloutId, attempt: u32) -> Self {
        Self { rollout, attempt }
    }

    /// The key of `attempt` of the rollout named `rollout`, checking the id.
    pub fn of(rollout: &str, attempt: u32) -> Result<Self, KeyError> {
        Ok(Self::new(RolloutId::new(rollout)?, attempt))
    }

    /// Parses a key as it appears in `/r/<key>/...` and in records.
    pub fn parse(key: &str) -> Result<Self, KeyError> {
        let bad = |reason: &str| KeyError {
            what: "attempt key",
            key: key.to_owned(),
            reason: reason.to_owned(),
        };
        if key.len() > MAX_ATTEMPT_KEY {
            return Err(bad(&format!("is longer than {MAX_ATTEMPT_KEY} bytes")));
        }
        let (rollout, attempt) = match split_attempt(key) {
            Some((rollout, n)) => {
                let attempt: u32 = n.parse().map_err(|_| bad("attempt number out of range"))?;
                if attempt == 0 || n.starts_with('0') {
                    return Err(bad(
                        "attempt suffix must be -a1, -a2, ... without leading zeros",
                    ));
                }
                (rollout, attempt)
            }
            None => (key, 0),
        };
        if let Some(reason) = rollout_problem(rollout) {
            return Err(bad(&reason));
        }
        Ok(Self::new(RolloutId(rollout.to_owned()), attempt))
    }

    pub fn rollout(&self) -> &RolloutId {
        &self.rollout
    }

    pub fn attempt(&self) -> u32 {
        self.attempt
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
            f.write_str(self.rollout.as_str())
        } else {
            write!(f, "{}-a{}", self.rollout, self.attempt)
        }
    }
}

impl PartialEq<&str> for AttemptKey {
    fn eq(&self, other: &&str) -> bool {
        Self::parse(other).is_ok_and(|k| k == *self)
    }
}

impl FromStr for AttemptKey {
    type Err = KeyError;
    fn from_str(s: &str) -> Result<Self, KeyError> {
        Self::parse(s)
    }
}

impl Serialize for AttemptKey {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for AttemptKey {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        Self::parse(&text).map_err(serde::de::Error::custom)
    }
}

impl Serialize for RolloutId {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for RolloutId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        Self::new(&text).map_err(serde::de::Error::custom)
    }
}

/// The characters of a rollout id (and so of an attempt key).
#[cfg(feature = "openapi")]
const KEY_PATTERN: &str = "^[A-Za-z0-9_-][A-Za-z0-9_.-]*$";

#[cfg(feature = "openapi")]
fn string_schema(
    description: &str,
    max_length: usize,
    examples: &[&str],
) -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
    utoipa::openapi::ObjectBuilder::new()
        .schema_type(utoipa::openapi::schema::Type::String)
        .description(Some(description))
        .min_length(Some(1))
        .max_length(Some(max_length))
        .pattern(Some(KEY_PATTERN))
        .examples(examples.iter().copied())
        .into()
}

#[cfg(feature = "openapi")]
impl utoipa::PartialSchema for RolloutId {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        string_schema(
            "A rollout id: ASCII letters, digits, `_`, `.`, `-` and `~`, not starting with `.` \
             or `~` and not ending in `-a<digits>` (which names an attempt); `<rollout>~<n>` \
             is branch n of a forked rollout.",
            MAX_ROLLOUT_ID,
            &["task-1.x"],
        )
    }
}

#[cfg(feature = "openapi")]
impl utoipa::ToSchema for RolloutId {}

#[cfg(feature = "openapi")]
impl utoipa::PartialSchema for AttemptKey {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        string_schema(
            "An attempt key: `<rollout id>` for attempt 0, `<rollout id>-a<N>` for attempt \
             N >= 1 (no leading zeros).",
            MAX_ATTEMPT_KEY,
            &["task-1.x", "task-1.x-a2"],
        )
    }
}

#[cfg(feature = "openapi")]
impl utoipa::ToSchema for AttemptKey {}

fn split_attempt(key: &str) -> Option<(&str, &str)> {
    let (rollout, n) = key.rsplit_once("-a")?;
    (!n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())).then_some((rollout, n))
}

fn rollout_problem(rollout: &str) -> Option<String> {
    if rollout.is_empty() {
        return Some("rollout id is empty".to_owned());
    }
    if rollout.len() > MAX_ROLLOUT_ID {
        return Some(format!(
            "rollout id is {} bytes, longer than {MAX_ROLLOUT_ID}",
            rollout.len()
        ));
    }
    if let Some(c) = crate::limits::outside_id_alphabet(rollout) {
        return Some(format!(
            "character {c:?} is not allowed in a rollout id (ASCII letters, digits, `_`, `.`, `-` and `~`)"
        ));
    }
    if rollout.starts_with(['.', '~', '-']) {
        return Some("rollout id starts with `.`, `~` or `-`".to_owned());
    }
    if split_attempt(rollout).is_some() {
        return Some(
            "rollout id may not end in -a<digits>, which names an attempt (`r-a2` is attempt 2 of `r`)"
                .to_owned(),
        );
    }
    None
}

/// The id of launch `n` of `attempt` of `rollout`: `<rollout>-a<attempt>-l<n>`,
/// the attempt always spelled out (`-a0` too), so launch ids of different
/// attempts never collide and sort by attempt.
pub fn launch_id(rollout: &str, attempt: u32, n: usize) -> String {
    format!("{rollout}-a{attempt}-l{n}")
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
            assert_eq!((k.rollout().as_str(), k.attempt()), (rollout, attempt));
            assert_eq!(k.to_string(), key);
            let json = serde_json::to_string(&k).unwrap();
            assert_eq!(json, format!("\"{key}\""));
            assert_eq!(serde_json::from_str::<AttemptKey>(&json).unwrap(), k);
        }
    }

    #[test]
    fn rejects_bad_keys() {
        for key in [
            "",
            "r7-a0",
            "r7-a01",
            "a b",
            "r-a1-a2",
            "r7-a99999999999",
            ".r",
        ] {
            assert!(AttemptKey::parse(key).is_err(), "{key} accepted");
        }
        assert!(AttemptKey::of("x-a3", 1).is_err());
        assert!(RolloutId::new("x-a3").is_err());
        assert!(RolloutId::new(&"x".repeat(MAX_ROLLOUT_ID + 1)).is_err());
        assert!(serde_json::from_str::<AttemptKey>("\"r-a0\"").is_err());
    }

    #[test]
    fn an_id_that_looks_like_an_attempt_is_refused_by_name() {
        let err = RolloutId::new("task-a12").unwrap_err();
        assert!(err.to_string().contains("-a<digits>"), "{err}");
        // Ids that merely contain `-a` are fine and stay distinct from attempts.
        for id in ["task-a", "task-ab1", "task-a1b", "a-a-b"] {
            let k = AttemptKey::new(RolloutId::new(id).unwrap(), 3);
            assert_eq!(AttemptKey::parse(&k.to_string()).unwrap(), k);
        }
    }

    #[test]
    fn branches_are_named_rollout_tilde_n() {
        let r = RolloutId::new("task-1").unwrap();
        let b = r.branch(3).unwrap();
        assert_eq!(b.as_str(), "task-1~3");
        assert_eq!(b.branch_of(), Some((r.clone(), 3)));
        let bb = b.branch(12).unwrap();
        assert_eq!(bb.branch_of(), Some((b.clone(), 12)));
        let k = AttemptKey::parse("task-1~3-a2").unwrap();
        assert_eq!((k.rollout(), k.attempt()), (&b, 2));
        for not in ["task-1", "x~", "x~0", "x~01", "x~a"] {
            if let Ok(id) = RolloutId::new(not) {
                assert_eq!(id.branch_of(), None, "{not}");
            }
        }
        assert!(RolloutId::new("~x").is_err(), "no leading ~");
        assert!(
            RolloutId::new("-x").is_err(),
            "no leading -: an id may become an argument"
        );
    }

    #[test]
    fn keys_sort_by_rollout_then_attempt() {
        let mut keys: Vec<AttemptKey> = ["b", "a-a2", "a", "a-a10"]
            .iter()
            .map(|k| AttemptKey::parse(k).unwrap())
            .collect();
        keys.sort();
        let text: Vec<String> = keys.iter().map(ToString::to_string).collect();
        assert_eq!(text, ["a", "a-a2", "a-a10", "b"]);
    }
}
