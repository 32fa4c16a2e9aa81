//! Errors of the supervisor.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("failed to write {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("failed to encode {path}: {source}")]
    Encode {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error("failed to read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {source}")]
    Format {
        path: PathBuf,
        source: rollpoint_proto::FormatError,
    },
    #[error("failed to create session directory {path}: {source}")]
    SessionDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("failed to {what}: {source}")]
    Sys {
        what: &'static str,
        source: nix::Error,
    },
    #[error("failed to start the harness {argv0:?}: {source}")]
    Spawn {
        argv0: String,
        source: std::io::Error,
    },
    #[error("control socket {path}: {source}")]
    Socket {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the child subreaper flag did not stick (PR_GET_CHILD_SUBREAPER reads 0)")]
    SubreaperNotSet,
    #[error("failed to {what} {path}: {source}")]
    Setup {
        what: &'static str,
        path: PathBuf,
        source: nix::Error,
    },
    #[error("failed to {what} {path}: {source}")]
    SetupIo {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("anchor: the host-side parent exited before the sandbox started")]
    ParentGone,
    #[error(
        "anchor: its owner (pid {0}, the process that started it) exited before the sandbox started"
    )]
    OwnerGone(i32),
    #[error("anchor: refusing to start: {0}")]
    Refused(String),
    #[error("{0}")]
    Usage(String),
    #[error(transparent)]
    Tree(#[from] rollpoint_proctree::Error),
}

/// Maps an I/O error of a setup step to [`Error::SetupIo`] naming `path`.
pub fn io_err(what: &'static str, path: &std::path::Path) -> impl FnOnce(std::io::Error) -> Error {
    let path = path.to_owned();
    move |source| Error::SetupIo { what, path, source }
}
