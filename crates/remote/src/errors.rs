//! What can go wrong with a remote store. Every message names the store's URL (which holds no
//! credential) and the object's key; the store's own error is kept as the cause.

use std::path::PathBuf;

/// A remote store could not be opened or an operation on it failed.
#[derive(Debug, thiserror::Error)]
pub enum RemoteError {
    /// The URL is not one this build can use.
    #[error("checkpoint store url {url:?}: {message}")]
    Url { url: String, message: String },
    /// The options file is unreadable, too open, or names an unknown key.
    #[error("checkpoint store options {path}: {message}")]
    Options { path: PathBuf, message: String },
    /// The store refused to be configured with these options.
    #[error("checkpoint store {url}: {message}")]
    Config { url: String, message: String },
    /// An object key is not a plain relative path.
    #[error("checkpoint store {url}: key {key:?}: {message}")]
    Key {
        url: String,
        key: String,
        message: String,
    },
    /// An operation on an object failed.
    #[error("checkpoint store {url}: {op} {key}: {source}")]
    Op {
        url: String,
        op: &'static str,
        key: String,
        source: rollpoint_proto::Cause,
    },
}
