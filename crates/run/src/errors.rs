//! Errors of the run controller; each names the path, line, field or
//! rollout it is about.

use std::path::PathBuf;

use rollpoint_proto::Cause;

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// A fork asked of a published checkpoint that holds nothing of the
    /// rollout to fork.
    #[error("fork of checkpoint {checkpoint}: {source}")]
    Unforkable {
        checkpoint: String,
        source: rollpoint_checkpoint::store::Unforkable,
    },
    /// A fork asked of a checkpoint that is not published here.
    #[error("checkpoint {checkpoint}: no such published checkpoint to fork: {source}")]
    NoCheckpoint {
        checkpoint: String,
        source: rollpoint_checkpoint::StoreError,
    },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: line {line}: field `{field}`: {message}")]
    Task {
        path: PathBuf,
        line: usize,
        field: String,
        message: String,
    },
    #[error("{path}: field `{field}`: {message}")]
    Config {
        path: PathBuf,
        field: String,
        message: String,
    },
    #[error("{path}: {source}")]
    State { path: PathBuf, source: Cause },
    #[error("{path}: line {line}: {source}")]
    Results {
        path: PathBuf,
        line: usize,
        source: Cause,
    },
    #[error("{what}: {source}")]
    Setup { what: &'static str, source: Cause },
    #[error("rollout {rollout}: {source}")]
    Rollout { rollout: String, source: Cause },
    #[error("checkpoint {checkpoint}: {source}")]
    Checkpoint { checkpoint: String, source: Cause },
}

impl RunError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Self::Io {
            path: path.into(),
            source,
        }
    }

    pub(crate) fn setup(what: &'static str, source: impl Into<Cause>) -> Self {
        Self::Setup {
            what,
            source: source.into(),
        }
    }

    pub(crate) fn state(path: impl Into<PathBuf>, source: impl Into<Cause>) -> Self {
        Self::State {
            path: path.into(),
            source: source.into(),
        }
    }

    pub(crate) fn rollout(rollout: impl Into<String>, source: impl Into<Cause>) -> Self {
        Self::Rollout {
            rollout: rollout.into(),
            source: source.into(),
        }
    }

    pub(crate) fn checkpoint(checkpoint: impl Into<String>, source: impl Into<Cause>) -> Self {
        Self::Checkpoint {
            checkpoint: checkpoint.into(),
            source: source.into(),
        }
    }
}

impl RunError {
    /// The reply kind of a refused fork: nothing of the rollout, or no such
    /// checkpoint, is not found; a rollout that must start over is a conflict.
    pub(crate) fn fork_refusal_code(&self) -> rollpoint_api::ErrorCode {
        use rollpoint_api::ErrorCode;
        use rollpoint_checkpoint::store::Unforkable;
        match self {
            RunError::NoCheckpoint { .. }
            | RunError::Unforkable {
                source: Unforkable::NotSaved { .. },
                ..
            } => ErrorCode::NotFound,
            RunError::Unforkable {
                source: Unforkable::Restart { .. },
                ..
            } => ErrorCode::Conflict,
            _ => ErrorCode::Failed,
        }
    }
}
