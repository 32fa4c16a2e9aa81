//! Errors of the owner, shared by the in-process owner, the HTTP routes and
//! the HTTP client, so a driver sees the same error whichever side it talks to.

use rollpoint_sandbox::Fault;

/// What went wrong with an owner call.
#[derive(Debug, thiserror::Error)]
pub enum OwnerError {
    #[error("session {session}: not found")]
    NotFound { session: String },
    #[error("bad request: field `{field}`: {message}")]
    BadRequest { field: String, message: String },
    #[error("missing or wrong bearer token")]
    Unauthorized,
    #[error("request body is over the limit of {limit} bytes")]
    TooLarge { limit: usize },
    #[error("session {session}: sandbox {sandbox}: {source}")]
    Backend {
        session: String,
        sandbox: String,
        source: Box<rollpoint_sandbox::Error>,
    },
    #[error("a batch of {call}: {source}")]
    Batch {
        call: &'static str,
        source: Box<rollpoint_sandbox::Error>,
    },
    #[error("snapshot {snapshot}: not found")]
    NoSnapshot { snapshot: String },
    #[error("snapshot {snapshot}: {source}")]
    SnapshotBackend {
        snapshot: String,
        source: Box<rollpoint_sandbox::Error>,
    },
    #[error("session {session}: cannot be done here: {message}")]
    Unprocessable {
        session: String,
        field: Option<String>,
        message: String,
    },
    #[error("session {session}: not capturable (the task has `capture: false`)")]
    NotCapturable { session: String },
    #[error(
        "session {session}: setup command {index} ({argv}) failed with {status}: {stderr_tail}"
    )]
    Setup {
        session: String,
        index: usize,
        argv: String,
        status: String,
        stderr_tail: String,
    },
    #[error("session {session}: backend call `{call}` did not finish: {source}")]
    Join {
        session: String,
        call: &'static str,
        source: tokio::task::JoinError,
    },
    #[error("internal error: {message}")]
    Internal { message: String },
    #[error("{url}: {source}")]
    Transport {
        url: String,
        source: rollpoint_proto::Cause,
    },
    /// The owner refused the request as a client error (4xx) this client
    /// cannot rebuild as a closer variant (the reply lacks a detail it
    /// needs, or is not an owner's reply: a wrong route or base URL). Its
    /// kind (`code`, as [`OwnerError::kind`]) and status are kept, so a
    /// relay refuses it the same way rather than as a server error.
    #[error("owner at {url} refused the request ({status} {code}): {message}")]
    Refused {
        url: String,
        status: u16,
        code: &'static str,
        message: String,
    },
    /// A server error (or an unreadable reply) the owner reported that has
    /// no closer match here.
    #[error("owner at {url} answered {status}: {message}")]
    Remote {
        url: String,
        status: u16,
        message: String,
    },
}

impl OwnerError {
    /// A backend error of `session`'s `sandbox`: a bad request naming the
    /// task's field when the backend found part of the request malformed,
    /// unprocessable when it is well formed but not for this sandbox or host,
    /// a backend failure otherwise.
    pub fn backend(session: &str, sandbox: &str, source: rollpoint_sandbox::Error) -> Self {
        let in_task = |field: String| {
            if field.starts_with("sandbox.") {
                format!("task.{field}")
            } else {
                field
            }
        };
        if let Some(snapshot) = source.missing_snapshot() {
            return Self::NoSnapshot {
                snapshot: snapshot.to_owned(),
            };
        }
        match source.fault() {
            Some(Fault::Malformed { field, message }) => Self::BadRequest {
                field: in_task(field),
                message,
            },
            Some(Fault::Unprocessable { field, message }) => Self::Unprocessable {
                session: session.to_owned(),
                field: field.map(in_task),
                message,
            },
            None => Self::Backend {
                session: session.to_owned(),
                sandbox: sandbox.to_owned(),
                source: Box::new(source),
            },
        }
    }

    pub(crate) fn bad(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self::BadRequest {
            field: field.into(),
            message: message.into(),
        }
    }

    /// A short machine-readable name of the error's kind, snake_case: the
    /// `code` of the error reply on the wire.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::NotFound { .. } | Self::NoSnapshot { .. } => "not_found",
            Self::BadRequest { .. } => "bad_request",
            Self::Unauthorized => "unauthorized",
            Self::TooLarge { .. } => "too_large",
            Self::Backend { .. } => "backend",
            Self::SnapshotBackend { .. } | Self::Batch { .. } => "backend",
            Self::NotCapturable { .. } => "not_capturable",
            Self::Setup { .. } => "setup",
            Self::Unprocessable { .. } => "unprocessable",
            Self::Join { .. } | Self::Internal { .. } => "internal",
            Self::Transport { .. } => "transport",
            Self::Refused { code, .. } => code,
            Self::Remote { .. } => "remote",
        }
    }
}

impl From<rollpoint_api::FieldError> for OwnerError {
    fn from(e: rollpoint_api::FieldError) -> Self {
        Self::bad(e.field, e.message)
    }
}

impl From<rollpoint_api::TooLarge> for OwnerError {
    fn from(e: rollpoint_api::TooLarge) -> Self {
        Self::TooLarge { limit: e.limit }
    }
}
