//! Errors of the scripted model server: script loading and binding.

use std::path::PathBuf;

/// Why a script could not be loaded or the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ScriptError {
    #[error("failed to read script {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("script {path} is not valid: {message}")]
    Invalid { path: PathBuf, message: String },
    #[error("script {path} has unsupported version {found} (this build reads version {supported})")]
    UnknownVersion {
        path: PathBuf,
        found: String,
        supported: u32,
    },
    #[error("failed to bind the model server on {addr}")]
    Bind {
        addr: std::net::SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to open request log {path}")]
    Log {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}
