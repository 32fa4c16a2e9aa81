//! Errors of the checkpoint control plane.
//!
//! A participant's own hooks fail with [`HookError`], a plain message, so
//! each kind keeps its own error type and only its text crosses into the
//! protocol. A control call fails with [`CallError`]: a wire code plus a
//! message (and the field, for a bad request), the same value in process and
//! after a trip over HTTP. Storage fails with [`StoreError`], naming the path
//! and what is wrong with it; the coordinator with [`CoordinatorError`].

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use rollpoint_api::Kind;

/// A participant hook failed, or refused what it was asked; the message
/// names what it was about.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct HookError {
    pub message: String,
    /// The code the call answers with: `HookFailed`, or a refusal's own
    /// (`NotFound`, `CheckpointConflict`).
    pub code: Code,
}

impl HookError {
    /// The hook failed.
    pub fn new(message: impl std::fmt::Display) -> Self {
        Self {
            message: message.to_string(),
            code: Code::HookFailed,
        }
    }

    /// What the hook was asked for is not there (a record to fork).
    pub fn not_found(message: impl std::fmt::Display) -> Self {
        Self {
            code: Code::NotFound,
            ..Self::new(message)
        }
    }

    /// The request conflicts with the participant's state (an attempt older
    /// than the one it holds).
    pub fn conflict(message: impl std::fmt::Display) -> Self {
        Self {
            code: Code::CheckpointConflict,
            ..Self::new(message)
        }
    }
}

/// The machine-readable kind of a control error, carried on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[schema(as = CheckpointErrorCode)]
#[serde(rename_all = "snake_case")]
pub enum Code {
    /// The body or a field of it is malformed (HTTP 400).
    BadRequest,
    /// Missing or wrong bearer token (401).
    Unauthorized,
    /// The checkpoint id was resumed recently and is refused (409).
    StaleCheckpoint,
    /// Another checkpoint is active, or the same id was asked with other
    /// arguments (409).
    CheckpointConflict,
    /// The call is not allowed in the current phase (409).
    InvalidPhase,
    /// The call did not finish within its deadline (504).
    DeadlineExceeded,
    /// The commit scope names an attempt this participant must restart (409).
    RestartInScope,
    /// The checkpoint (or this participant's share of it) asked for does not
    /// exist (404).
    NotFound,
    /// A participant hook failed (500).
    HookFailed,
    /// Reading or writing checkpoint files failed (500).
    Storage,
    /// The request body is over the limit (413).
    TooLarge,
    /// The participant could not be reached (client side only).
    Transport,
    /// The participant answered something this client cannot read.
    Remote,
}

impl Code {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::BadRequest => "bad_request",
            Self::Unauthorized => "unauthorized",
            Self::StaleCheckpoint => "stale_checkpoint",
            Self::CheckpointConflict => "checkpoint_conflict",
            Self::InvalidPhase => "invalid_phase",
            Self::DeadlineExceeded => "deadline_exceeded",
            Self::RestartInScope => "restart_in_scope",
            Self::NotFound => "not_found",
            Self::HookFailed => "hook_failed",
            Self::Storage => "storage",
            Self::TooLarge => "too_large",
            Self::Transport => "transport",
            Self::Remote => "remote",
        }
    }

    /// The HTTP status a reply with this code carries.
    pub fn http_status(self) -> u16 {
        match self {
            Self::BadRequest => 400,
            Self::Unauthorized => 401,
            Self::TooLarge => 413,
            Self::NotFound => 404,
            Self::StaleCheckpoint
            | Self::CheckpointConflict
            | Self::InvalidPhase
            | Self::RestartInScope => 409,
            Self::DeadlineExceeded => 504,
            Self::HookFailed | Self::Storage | Self::Transport | Self::Remote => 500,
        }
    }
}

impl std::fmt::Display for Code {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A failed control call.
#[derive(
    Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize, utoipa::ToSchema,
)]
#[error("{code}: {message}")]
#[serde(deny_unknown_fields)]
pub struct CallError {
    pub code: Code,
    pub message: String,
    /// For a bad request: the path of the field it is about.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
}

impl CallError {
    pub fn new(code: Code, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            field: None,
        }
    }

    pub fn bad(field: impl Into<String>, message: impl std::fmt::Display) -> Self {
        let field = field.into();
        Self {
            code: Code::BadRequest,
            message: format!("field `{field}`: {message}"),
            field: Some(field),
        }
    }

    pub fn stale(checkpoint: &str) -> Self {
        Self::new(
            Code::StaleCheckpoint,
            format!("checkpoint {checkpoint} was resumed and is refused"),
        )
    }

    pub fn hook(action: &str, err: &HookError) -> Self {
        Self::new(err.code, format!("{action}: {err}"))
    }

    /// `subject` names what the call was about (`checkpoint c1`).
    pub fn deadline(action: &str, subject: &str, timeout_ms: u64) -> Self {
        Self::new(
            Code::DeadlineExceeded,
            format!("{action} of {subject} did not finish within {timeout_ms} ms"),
        )
    }
}

impl CallError {
    /// The code of a storage error: a file that is not there is not found.
    pub fn store_code(e: &StoreError) -> Code {
        match e {
            StoreError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
                Code::NotFound
            }
            _ => Code::Storage,
        }
    }
}

impl From<rollpoint_api::FieldError> for CallError {
    fn from(e: rollpoint_api::FieldError) -> Self {
        Self::bad(e.field, e.message)
    }
}

impl From<rollpoint_api::TooLarge> for CallError {
    fn from(e: rollpoint_api::TooLarge) -> Self {
        Self::new(Code::TooLarge, e.to_string())
    }
}

impl From<StoreError> for CallError {
    fn from(e: StoreError) -> Self {
        Self::new(Self::store_code(&e), e.to_string())
    }
}

/// Reading, writing or pruning checkpoint files failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: not valid json: {source}")]
    Json {
        path: PathBuf,
        source: rollpoint_proto::Cause,
    },
    #[error("{path}: unknown version {found} (this build reads version {expected})")]
    Version {
        path: PathBuf,
        found: u32,
        expected: u32,
    },
    #[error("{path}: field `{field}` is {found:?}, expected {expected:?}")]
    Mismatch {
        path: PathBuf,
        field: &'static str,
        expected: String,
        found: String,
    },
    #[error("{path}: sha256 is {found}, the manifest says {expected}")]
    Digest {
        path: PathBuf,
        expected: String,
        found: String,
    },
    #[error("{path}: holds {found} records, the manifest says {expected}")]
    Count {
        path: PathBuf,
        expected: u64,
        found: u64,
    },
    #[error("{path}: line {line}: {message}")]
    Record {
        path: PathBuf,
        line: u64,
        message: String,
    },
    #[error("record {index}: {message}")]
    Export { index: usize, message: String },
    #[error("{path}: {source}")]
    Invalid {
        path: PathBuf,
        source: rollpoint_proto::Cause,
    },
    /// The object store failed (it could not be reached, refused, or timed out).
    #[error(transparent)]
    Remote(#[from] rollpoint_remote::RemoteError),
    /// Another coordinator published this marker number first: this one may not publish.
    #[error(
        "{url}: publish marker {seq} is held by checkpoint {holder}: another coordinator published since this one last did, so it may not publish (fenced)"
    )]
    Fenced {
        url: String,
        seq: u64,
        holder: String,
    },
    /// The run in the store is driven by another process (its newest claim is not this one's).
    #[error("{url}: the run is held by {holder}: {why} (fenced)")]
    Claimed {
        url: String,
        holder: String,
        why: String,
    },
    #[error("{what} {value:?}: {message}")]
    Name {
        what: &'static str,
        value: String,
        message: &'static str,
    },
}

impl StoreError {
    pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.into();
        move |source| Self::Io { path, source }
    }

    pub(crate) fn json(
        path: impl Into<PathBuf>,
        source: impl Into<rollpoint_proto::Cause>,
    ) -> Self {
        Self::Json {
            path: path.into(),
            source: source.into(),
        }
    }

    pub(crate) fn invalid(
        path: impl Into<PathBuf>,
        source: impl Into<rollpoint_proto::Cause>,
    ) -> Self {
        Self::Invalid {
            path: path.into(),
            source: source.into(),
        }
    }
}

/// What the coordinator could not do.
#[derive(Debug, thiserror::Error)]
pub enum CoordinatorError {
    #[error("{action} at {kind}/{instance}: {source}")]
    Call {
        action: &'static str,
        kind: Kind,
        instance: String,
        source: CallError,
    },
    #[error("participant {index}: status: {source}")]
    Discover { index: usize, source: CallError },
    #[error("participant {kind}/{instance} is listed twice")]
    Duplicate { kind: Kind, instance: String },
    #[error("checkpoint {checkpoint}: {source}")]
    Store {
        checkpoint: String,
        source: StoreError,
    },
    /// A restore's move names a participant it cannot move from or to.
    #[error("checkpoint {checkpoint}: moves[{index}].{field}: {message}")]
    BadMove {
        checkpoint: String,
        index: usize,
        field: MoveField,
        message: String,
    },
    #[error(
        "checkpoint {checkpoint} was written by other participants (not here: [{missing}]; not in it: [{extra}])"
    )]
    Members {
        checkpoint: String,
        missing: String,
        extra: String,
    },
    #[error("checkpoint {checkpoint} is published, but resuming failed: {source}")]
    PublishedNotResumed {
        checkpoint: String,
        source: Box<CoordinatorError>,
    },
    #[error("checkpoint {checkpoint}: not prepared: {detail}")]
    NotPrepared { checkpoint: String, detail: String },
    #[error("fork of checkpoint {checkpoint}: {source}")]
    Fork {
        checkpoint: String,
        source: CallError,
    },
    #[error("{action} of checkpoint {checkpoint} failed at {}", join(.failures))]
    Several {
        action: &'static str,
        checkpoint: String,
        failures: Vec<CoordinatorError>,
    },
}

/// The field of a restore's move an error is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MoveField {
    /// The participant that is gone.
    From,
    /// The participant that takes its share over.
    To,
}

impl std::fmt::Display for MoveField {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::From => "from",
            Self::To => "to",
        })
    }
}

fn join(errors: &[CoordinatorError]) -> String {
    errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}
