//! Errors of the driver. A bad bookmark or task names the field; an owner or
//! supervisor failure names the rollout and what it was doing.

use std::path::PathBuf;

use rollpoint_proto::Cause;

/// A bookmark that cannot be continued: the field and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("field `{field}`: {message}")]
pub struct BookmarkError {
    /// Dotted path from `bookmark`, e.g. `bookmark.launches[2].ended_at_ms`.
    pub field: String,
    pub message: String,
}

impl BookmarkError {
    pub(crate) fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
        }
    }
}

/// What went wrong in the driver.
#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    #[error("rollout {rollout}: bookmark {source}")]
    Bookmark {
        rollout: String,
        source: BookmarkError,
    },
    #[error("rollout task field `{field}`: {message}")]
    Task { field: String, message: String },
    #[error("driver setting `{field}`: {message}")]
    Config {
        field: &'static str,
        message: String,
    },
    #[error("rollout {rollout}: already registered")]
    Duplicate { rollout: String },
    #[error("rollout {rollout}: not registered")]
    Unknown { rollout: String },
    #[error("rollout {rollout}: the run ended without a result: {message}")]
    Lost { rollout: String, message: String },
    #[error("rollout {rollout}: cancel did not finish within {limit_s} s")]
    CancelTimeout { rollout: String, limit_s: u64 },
    #[error("{path}: {what}: {source}")]
    Store {
        path: PathBuf,
        what: &'static str,
        source: Cause,
    },
}

/// A supervisor control-socket exchange failed.
#[derive(Debug, thiserror::Error)]
pub enum SupervisorError {
    #[error("{path}: {what}: {source}")]
    Socket {
        path: PathBuf,
        what: &'static str,
        source: Cause,
    },
    #[error("{path}: {source}")]
    Reply {
        path: PathBuf,
        source: rollpoint_proto::FormatError,
    },
    #[error("{path}: no reply within {limit_s} s")]
    Timeout { path: PathBuf, limit_s: u64 },
}

/// An adapter could not do its part.
#[derive(Debug, thiserror::Error)]
#[error("adapter {adapter}: {message}")]
pub struct AdapterError {
    pub adapter: &'static str,
    pub message: String,
}

impl AdapterError {
    pub(crate) fn new(adapter: &'static str, message: impl Into<String>) -> Self {
        Self {
            adapter,
            message: message.into(),
        }
    }
}
