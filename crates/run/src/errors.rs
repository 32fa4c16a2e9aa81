//! Errors of the run controller; each names the path, line, field or
//! rollout it is about.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum RunError {
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
    #[error("{path}: {message}")]
    State { path: PathBuf, message: String },
    #[error("{path}: line {line}: {message}")]
    Results {
        path: PathBuf,
        line: usize,
        message: String,
    },
    #[error("{what}: {message}")]
    Setup { what: &'static str, message: String },
    #[error("rollout {rollout}: {message}")]
    Rollout { rollout: String, message: String },
    #[error("checkpoint {checkpoint}: {message}")]
    Checkpoint { checkpoint: String, message: String },
}

impl RunError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Self::Io {
            path: path.into(),
            source,
        }
    }

    pub(crate) fn setup(what: &'static str, message: impl std::fmt::Display) -> Self {
        Self::Setup {
            what,
            message: message.to_string(),
        }
    }
}
