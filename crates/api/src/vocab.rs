//! The control plane's words, shared by every participant, the coordinator
//! and their clients: what a participant is and where it stands.

use serde::{Deserialize, Serialize};

/// What a participant is. The order is the prepare order: the model closes
/// admission first and holds replies, so agents waiting on it reach a
/// boundary; resources go last because agents call them until they park.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    utoipa::ToSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Model,
    Agent,
    Resources,
}

impl Kind {
    /// Every kind, in prepare order.
    pub const ALL: [Self; 3] = [Self::Model, Self::Agent, Self::Resources];

    /// The kind's name on the wire and on disk.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Model => "model",
            Self::Agent => "agent",
            Self::Resources => "resources",
        }
    }
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where a participant is in the protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    Idle,
    Preparing,
    Prepared,
    Committed,
    Restored,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Idle => "idle",
            Self::Preparing => "preparing",
            Self::Prepared => "prepared",
            Self::Committed => "committed",
            Self::Restored => "restored",
        }
    }
}

impl std::fmt::Display for Phase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
