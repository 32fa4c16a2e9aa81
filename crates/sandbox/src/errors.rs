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
    /// The field of the request this error refuses, when it is the request's
    /// mistake (a spec field, a sandbox path) rather than a failure.
    pub fn refused_field(&self) -> Option<(String, String)> {
        match self {
            Self::Spec { field, message, .. } => Some((field.clone(), message.clone())),
            Self::ParentComponent { .. }
            | Self::NotAFile { .. }
            | Self::Escape { .. }
            | Self::TooLarge { .. } => Some(("path".to_owned(), self.to_string())),
            Self::Io { source, .. }
                if matches!(
                    source.kind(),
                    std::io::ErrorKind::NotFound
                        | std::io::ErrorKind::IsADirectory
                        | std::io::ErrorKind::NotADirectory
                ) =>
            {
                Some(("path".to_owned(), self.to_string()))
            }
            _ => None,
        }
    }

    /// Whether the error says the snapshot asked for does not exist (a
    /// caller answers "not found" rather than a failure).
    pub fn is_no_snapshot(&self) -> bool {
        matches!(
            self,
            Self::Store {
                source: rollpoint_snapshot::Error::NoSnapshot { .. },
                ..
            }
        )
    }
}
