//! Errors of the scripted model server: script loading and binding, the tokenizer of the
//! completions route, a completion request, and an outage given on the command line.

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
    #[error("{}: {source}", .path.display())]
    Tokenizer {
        path: PathBuf,
        #[source]
        source: tokenizers::Error,
    },
    #[error("{}: no {token} token", .path.display())]
    NoEndToken { path: PathBuf, token: &'static str },
    #[error("completions are served already")]
    CompletionsServed,
}

/// Why a `/v1/completions` request got no completion; its text is the reply's message.
#[derive(Debug, thiserror::Error)]
pub enum CompletionError {
    #[error("`prompt` is not a list of token ids")]
    PromptNotList,
    #[error("`prompt` holds something that is not a token id")]
    PromptNotIds,
    #[error("the prompt does not decode: {0}")]
    Decode(#[source] tokenizers::Error),
    #[error("the script fails this step")]
    ScriptFails,
    #[error("the answer does not encode: {0}")]
    Encode(#[source] tokenizers::Error),
}

/// An outage spec (`cut`, `STATUS` or `STATUS:SECONDS`) that does not read; names the spec.
#[derive(Debug, thiserror::Error)]
pub enum OutageError {
    #[error("{0:?}: give `cut`, a status 400..=599, or STATUS:SECONDS")]
    Spec(String),
    #[error("{spec:?}: Retry-After seconds: {source}")]
    RetryAfter {
        spec: String,
        #[source]
        source: std::num::ParseIntError,
    },
}
