//! Errors of sandboxes: file transfer, the local backend and its anchor.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{path}: `..` is not allowed in a sandbox path")]
    ParentComponent { path: PathBuf },
    #[error("{path}: not a file path (empty, or names the sandbox root)")]
    NotAFile { path: PathBuf },
    #[error("{path}: resolves outside the sandbox root {root} (a symlink points out)")]
    Escape { root: PathBuf, path: PathBuf },
    #[error("{path}: {size} bytes is over the limit of {limit}")]
    TooLarge {
        path: PathBuf,
        size: u64,
        limit: u64,
    },
    #[error("failed to {what} {path} in sandbox root {root}: {source}")]
    Io {
        what: &'static str,
        root: PathBuf,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("sandbox {sandbox}: unknown")]
    UnknownSandbox { sandbox: String },
    #[error("sandbox {sandbox}: already exists")]
    SandboxExists { sandbox: String },
    #[error("sandbox {sandbox}: {what}: {source}")]
    Setup {
        sandbox: String,
        what: String,
        source: std::io::Error,
    },
    #[error("sandbox {sandbox}: anchor at {socket}: {message}")]
    Anchor {
        sandbox: String,
        socket: PathBuf,
        message: String,
    },
    #[error("sandbox {sandbox}: {source}")]
    Store {
        sandbox: String,
        source: rollpoint_snapshot::Error,
    },
    #[error("{path}: {source}")]
    Record {
        path: PathBuf,
        source: rollpoint_proto::FormatError,
    },
    #[error("sandbox {sandbox}: {message}")]
    Invalid { sandbox: String, message: String },
    /// A well-formed spec field this host cannot honour: a base or host
    /// path that is not there, an image that cannot be read, a quota the
    /// store cannot keep.
    #[error("sandbox {sandbox}: {field}: {message}")]
    Unsupported {
        sandbox: String,
        field: String,
        message: String,
    },
    /// The anchor refused a request as it stands (its sender can fix it).
    #[error("sandbox {sandbox}: refused: {message}")]
    Refused { sandbox: String, message: String },
    /// A field of the sandbox's spec is refused (a request's mistake, not the
    /// host's): `field` is its path in the spec, `sandbox.network.allow[0]`.
    #[error("sandbox {sandbox}: {field}: {message}")]
    Spec {
        sandbox: String,
        field: String,
        message: String,
    },
}

impl Error {
    /// How the request this error answers was at fault, if it was: malformed
    /// (the API description says so too), or well formed but not for this
    /// sandbox or host. `None`: the backend failed.
    pub fn fault(&self) -> Option<Fault> {
        let path = || Some("path".to_owned());
        match self {
            Self::Spec { field, message, .. } => Some(Fault::Malformed {
                field: field.clone(),
                message: message.clone(),
            }),
            Self::ParentComponent { .. } => Some(Fault::Malformed {
                field: "path".to_owned(),
                message: self.to_string(),
            }),
            Self::Unsupported { field, message, .. } => Some(Fault::Unprocessable {
                field: Some(field.clone()),
                message: message.clone(),
            }),
            Self::Refused { message, .. } => Some(Fault::Unprocessable {
                field: None,
                message: message.clone(),
            }),
            Self::NotAFile { .. } | Self::Escape { .. } | Self::TooLarge { .. } => {
                Some(Fault::Unprocessable {
                    field: path(),
                    message: self.to_string(),
                })
            }
            Self::Io { source, .. }
                if matches!(
                    source.kind(),
                    std::io::ErrorKind::NotFound
                        | std::io::ErrorKind::IsADirectory
                        | std::io::ErrorKind::NotADirectory
                ) =>
            {
                Some(Fault::Unprocessable {
                    field: path(),
                    message: self.to_string(),
                })
            }
            _ => None,
        }
    }

    /// The snapshot asked for, when the error says it does not exist (a
    /// caller answers "not found" rather than a failure).
    pub fn missing_snapshot(&self) -> Option<&str> {
        match self {
            Self::Store {
                source: rollpoint_snapshot::Error::NoSnapshot { snapshot, .. },
                ..
            } => Some(snapshot),
            _ => None,
        }
    }
}

/// How a request was at fault ([`Error::fault`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// A field is malformed: `field` is its path in the request.
    Malformed { field: String, message: String },
    /// Well formed, but this sandbox or host cannot act on it.
    Unprocessable {
        field: Option<String>,
        message: String,
    },
}
