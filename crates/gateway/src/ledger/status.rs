//! A call's status: how it ended, or why it was refused. Stored and exported as its name.

use std::fmt;

use rusqlite::ToSql;
use rusqlite::types::ToSqlOutput;
use serde::{Deserialize, Serialize};

/// A call's status, as the `status` column and the records name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CallStatus {
    /// Admitted, its reply not yet recorded.
    InFlight,
    /// Answered by the upstream with a 2xx.
    Ok,
    /// Answered from the ledger.
    Replayed,
    /// The gateway stopped (or the records were exported) before the call ended.
    Interrupted,
    /// Answered by the upstream with a non-2xx, passed on.
    UpstreamStatus,
    /// The upstream could not be reached (502).
    UpstreamUnreachable,
    /// The upstream broke off the reply.
    UpstreamBroken,
    /// Refused: the body is not a JSON object (400).
    InvalidJson,
    /// Refused: the body could not be read (400).
    BodyUnreadable,
    /// Refused: the key is malformed or not registered (404).
    UnknownCaptureKey,
    /// Refused: a later attempt of the rollout is registered (409).
    AttemptFenced,
    /// Refused: the body is over `max_body_bytes` (413).
    BodyTooLarge,
    /// Refused: no model route at that path (404).
    UnknownRoute,
    /// Refused: the upstream does not serve that route (404).
    RouteNotServed,
    /// With token-in/token-out: the chat template or the tokenizer could not turn the
    /// conversation into tokens (400); nothing was sent upstream.
    TemplateFailed,
}

impl CallStatus {
    /// Every status, in declaration order.
    pub const ALL: [Self; 15] = [
        Self::InFlight,
        Self::Ok,
        Self::Replayed,
        Self::Interrupted,
        Self::UpstreamStatus,
        Self::UpstreamUnreachable,
        Self::UpstreamBroken,
        Self::InvalidJson,
        Self::BodyUnreadable,
        Self::UnknownCaptureKey,
        Self::AttemptFenced,
        Self::BodyTooLarge,
        Self::UnknownRoute,
        Self::RouteNotServed,
        Self::TemplateFailed,
    ];

    /// The status as stored in the ledger and named in error replies.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::InFlight => "in_flight",
            Self::Ok => "ok",
            Self::Replayed => "replayed",
            Self::Interrupted => "interrupted",
            Self::UpstreamStatus => "upstream_status",
            Self::UpstreamUnreachable => "upstream_unreachable",
            Self::UpstreamBroken => "upstream_broken",
            Self::InvalidJson => "invalid_json",
            Self::BodyUnreadable => "body_unreadable",
            Self::UnknownCaptureKey => "unknown_capture_key",
            Self::AttemptFenced => "attempt_fenced",
            Self::BodyTooLarge => "body_too_large",
            Self::UnknownRoute => "unknown_route",
            Self::RouteNotServed => "route_not_served",
            Self::TemplateFailed => "template_failed",
        }
    }

    /// The status named `name`, if there is one.
    #[must_use]
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.as_str() == name)
    }
}

impl fmt::Display for CallStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq<&str> for CallStatus {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl ToSql for CallStatus {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::from(self.as_str()))
    }
}

#[cfg(test)]
#[expect(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn every_status_is_its_name_in_sql_and_json() {
        for status in CallStatus::ALL {
            let name = status.as_str();
            assert_eq!(CallStatus::from_name(name), Some(status));
            assert_eq!(
                serde_json::to_string(&status).unwrap(),
                format!("\"{name}\"")
            );
            let back: CallStatus = serde_json::from_str(&format!("\"{name}\"")).unwrap();
            assert_eq!(back, status);
        }
        assert_eq!(CallStatus::from_name("finished"), None);
    }
}
