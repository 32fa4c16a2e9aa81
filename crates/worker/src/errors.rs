//! Error types of the worker library. Each names the file, field or offset it is about, so a
//! caller (or a person reading a result) can act on it without a debugger.

use std::path::PathBuf;

/// The input file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    #[error("input {path}: cannot read: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("input {path}: not valid json: {source}")]
    Json {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error("input {path}: field `{field}`: {message}")]
    Field {
        path: PathBuf,
        field: String,
        message: String,
    },
}

impl InputError {
    /// The field the error is about, when there is one.
    pub fn field(&self) -> Option<&str> {
        match self {
            InputError::Field { field, .. } => Some(field),
            InputError::Read { .. } | InputError::Json { .. } => None,
        }
    }
}

/// The checkpoint journal could not be read, replayed or written.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    #[error("checkpoint {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("checkpoint {path}: not a rollpoint worker checkpoint (bad magic)")]
    BadMagic { path: PathBuf },
    #[error(
        "checkpoint {path}: unknown journal format version {found} (this worker reads {known})"
    )]
    UnknownFormat {
        path: PathBuf,
        found: u32,
        known: u32,
    },
    #[error("checkpoint {path}: record at offset {offset} is corrupted: {reason}")]
    Corrupt {
        path: PathBuf,
        offset: u64,
        reason: String,
    },
    #[error(
        "checkpoint {path}: record at offset {offset} has unknown record version {found} (this worker reads {known})"
    )]
    UnknownRecordVersion {
        path: PathBuf,
        offset: u64,
        found: u8,
        known: u8,
    },
    #[error("checkpoint {path}: record at offset {offset} does not fit the transcript: {reason}")]
    Replay {
        path: PathBuf,
        offset: u64,
        reason: String,
    },
    #[error("checkpoint {path}: holds no header record")]
    NoHeader { path: PathBuf },
    #[error("checkpoint {path}: belongs to rollout `{found}`, not `{expected}`")]
    OtherRollout {
        path: PathBuf,
        found: String,
        expected: String,
    },
    #[error("checkpoint {path}: belongs to another task (its prompt differs from this input's)")]
    OtherTask { path: PathBuf },
    #[error("checkpoint {path}: cannot encode record: {source}")]
    Encode {
        path: PathBuf,
        source: serde_json::Error,
    },
}

/// A record that does not follow from the transcript it is applied to.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ApplyError(pub String);

/// A result file that does not meet the result contract.
#[derive(Debug, thiserror::Error)]
pub enum ResultError {
    #[error("result: not valid: {0}")]
    Schema(String),
    #[error("result: unknown version {found} (this worker writes {known})")]
    UnknownVersion { found: u32, known: u32 },
    #[error("result: {0}")]
    Invariant(String),
}

/// A model call that did not produce a usable reply.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// Worth retrying later: the endpoint was unreachable, slow or overloaded.
    #[error("model call to {url}: {message}")]
    Transient { url: String, message: String },
    /// Retrying the same request will not help.
    #[error("model call to {url}: {message}")]
    Fatal { url: String, message: String },
    /// The rollout's wall-clock budget ran out during the call.
    #[error("model call to {url}: the rollout deadline passed")]
    Deadline { url: String },
}

/// A model reply body that is not a reply of its API; each variant names the field at fault.
#[derive(Debug, thiserror::Error)]
pub enum ReplyError {
    #[error("reply is not json: {0}")]
    NotJson(#[source] serde_json::Error),
    #[error("reply has no {field}")]
    Absent { field: &'static str },
    #[error("{field} is missing")]
    Missing { field: String },
    #[error("{field} is not text: {value}")]
    NotText {
        field: &'static str,
        value: serde_json::Value,
    },
    #[error("{field} is not a list")]
    NotList { field: &'static str },
}

/// What the loop needs besides the input file is not there: each variant names the input field
/// or the environment it is about.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error("input field `workdir`: {} is not a directory", .0.display())]
    Workdir(PathBuf),
    #[error("cannot read the current directory: {0}")]
    CurrentDir(#[source] std::io::Error),
    #[error("input field `model.api_key_env`: environment variable {name} is not set")]
    ApiKeyEnv {
        name: String,
        #[source]
        source: std::env::VarError,
    },
}

/// A record the loop made that its own transcript refused: a fault of the worker itself.
#[derive(Debug, thiserror::Error)]
#[error("internal error: {0}")]
pub struct InternalError(#[source] pub ApplyError);
