//! Errors of the checkpoint control plane. A participant's own hooks fail
//! with [`HookError`], a plain message, so each kind keeps its own error type
//! and only its text crosses into the protocol.

/// A participant hook failed; the message names what it was about.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct HookError {
    pub message: String,
}

impl HookError {
    pub fn new(message: impl std::fmt::Display) -> Self {
        Self {
            message: message.to_string(),
        }
    }
}
