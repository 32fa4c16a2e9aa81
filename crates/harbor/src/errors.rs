//! Errors of reading a Harbor dataset and building its environments; each
//! names the task directory, the file or the field.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum HarborError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: field `{field}`: {message}")]
    Field {
        path: PathBuf,
        field: String,
        message: String,
    },
    /// The task needs what rollpoint cannot give.
    #[error("task {task}: refused: {reason}")]
    Refused { task: String, reason: String },
    #[error("{path}: holds no Harbor task (no task.toml in it or in its subdirectories)")]
    Empty { path: PathBuf },
    #[error("task {task}: building environment/Dockerfile failed: {message}")]
    Build { task: String, message: String },
    #[error("task {task}: building environment/Dockerfile took over {seconds} s")]
    BuildTimeout { task: String, seconds: u64 },
    #[error("task {task}: its rollout task is not valid: {source}")]
    Task {
        task: String,
        source: rollpoint_driver::DriverError,
    },
}

impl HarborError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Self::Io {
            path: path.into(),
            source,
        }
    }
}
