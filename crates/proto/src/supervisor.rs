//! The supervisor's control socket protocol: one JSON request line, one JSON
//! reply line, per connection.

use serde::{Deserialize, Serialize};

use crate::launch::LaunchRecord;
use crate::receipt::Receipt;
use crate::version::FormatError;

/// Version of [`Request`] and [`Reply`].
pub const SUPERVISOR_VERSION: u32 = 1;

/// Name of the control socket in the session directory.
pub const SUPERVISOR_SOCKET: &str = "control.sock";

/// What a client asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verb {
    Status,
    Pause,
    Continue,
    Stop,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Request {
    pub v: u32,
    pub verb: Verb,
}

impl Request {
    pub fn new(verb: Verb) -> Self {
        Self {
            v: SUPERVISOR_VERSION,
            verb,
        }
    }

    pub fn decode(bytes: &[u8]) -> Result<Self, FormatError> {
        crate::version::decode("control request", SUPERVISOR_VERSION, bytes)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Reply {
    pub v: u32,
    /// The launch record as it stands after the request.
    pub launch: Option<LaunchRecord>,
    /// For pause, continue and stop.
    pub receipt: Option<Receipt>,
    /// Set when the request itself could not be served.
    pub error: Option<String>,
}

impl Reply {
    pub fn decode(bytes: &[u8]) -> Result<Self, FormatError> {
        crate::version::decode("control reply", SUPERVISOR_VERSION, bytes)
    }
}
