//! A call's identity, typed from its admission to its row: the attempt it belongs to and its
//! sequence number within that attempt. Written `<attempt key>#<seq>` in the ledger's
//! `call_id` column, the `X-Rollpoint-Call-Id` header and logs; never parsed back inside the
//! gateway.

use std::fmt;

use rollpoint_proto::key::AttemptKey;

/// One call of one attempt.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CallId {
    pub key: AttemptKey,
    /// Sequence number within the attempt (see `lookup::next_seq`).
    pub seq: i64,
}

impl CallId {
    #[must_use]
    pub fn new(key: AttemptKey, seq: i64) -> Self {
        Self { key, seq }
    }
}

impl fmt::Display for CallId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}#{}", self.key, self.seq)
    }
}

/// The key a row is filed under: an attempt's, or, for a request refused because its route
/// names no attempt, the route's text as sent (its rows are filed under it as their rollout).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RowKey {
    Attempt(AttemptKey),
    Unparsed(String),
}

impl RowKey {
    /// The `capture_key` column.
    #[must_use]
    pub fn column(&self) -> String {
        match self {
            Self::Attempt(k) => k.to_string(),
            Self::Unparsed(raw) => raw.clone(),
        }
    }

    /// The `rollout` column.
    #[must_use]
    pub fn rollout(&self) -> &str {
        match self {
            Self::Attempt(k) => k.rollout().as_str(),
            Self::Unparsed(raw) => raw,
        }
    }

    /// The `attempt` column.
    #[must_use]
    pub fn attempt(&self) -> u32 {
        match self {
            Self::Attempt(k) => k.attempt(),
            Self::Unparsed(_) => 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_as_key_hash_seq() {
        let key = AttemptKey::parse("r1-a2").expect("key");
        assert_eq!(CallId::new(key, 7).to_string(), "r1-a2#7");
    }
}
