//! Errors of the gateway library.

/// Why a gateway operation failed.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    #[error("gateway attach socket {path}: {source}")]
    AttachSocket {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("capture key `{key}` is malformed: {reason}")]
    BadCaptureKey { key: String, reason: String },
    #[error("failed to open ledger {path}")]
    LedgerOpen {
        path: std::path::PathBuf,
        #[source]
        source: rusqlite::Error,
    },
    #[error("failed to prepare ledger file {path}")]
    LedgerFile {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("ledger {path} has schema version {found}, newer than this build's {supported}")]
    LedgerTooNew {
        path: std::path::PathBuf,
        found: i64,
        supported: i64,
    },
    #[error(
        "ledger {path} has schema version {found}, older than this build's {supported} (a gateway of this build upgrades it when it opens it)"
    )]
    LedgerTooOld {
        path: std::path::PathBuf,
        found: i64,
        supported: i64,
    },
    #[error("ledger query failed: {context}")]
    Ledger {
        context: &'static str,
        #[source]
        source: rusqlite::Error,
    },
    #[error("ledger row {call_id} has unknown status `{value}`")]
    UnknownStatus { call_id: String, value: String },
    #[error("ledger commit failed: {message}")]
    CommitFailed { message: String },
    #[error("ledger writer thread is gone")]
    LedgerGone,
    #[error("ledger record line {line}: {message}")]
    BadRecord { line: usize, message: String },
    #[error(
        "ledger record line {line}: unsupported record version {found} (this build reads {supported})"
    )]
    UnknownRecordVersion {
        line: usize,
        found: String,
        supported: u32,
    },
    #[error("install for rollout {rollout}: {message}")]
    Install { rollout: String, message: String },
    #[error(
        "attempt {attempt} of rollout {rollout} is older than the registered attempt {current}"
    )]
    StaleAttempt {
        rollout: String,
        attempt: u32,
        current: u32,
    },
    #[error("upstream url `{url}` is not an http:// or https:// url")]
    BadUpstream { url: String },
    #[error("upstream credential from {origin}: {message}")]
    Credential { origin: String, message: String },
    #[error("token-in/token-out: {0}")]
    Tito(#[from] crate::tito::prompt::LoadError),
    #[error("CA file {path}: {message}")]
    CaFile {
        path: std::path::PathBuf,
        message: String,
    },
    #[error("model {name} is given two upstreams")]
    DuplicateModel { name: String },
    #[error("max_upstream_calls {value} is outside 0..={max}")]
    UpstreamCalls { value: usize, max: usize },
    #[error("gateway admin {url}: {source}")]
    Admin {
        url: String,
        source: rollpoint_proto::Cause,
    },
    #[error("route key {path}: {source}")]
    RouteKey {
        path: std::path::PathBuf,
        source: rollpoint_proto::Cause,
    },
    #[error("failed to build the upstream http client")]
    Client(#[source] reqwest::Error),
}

impl GatewayError {
    /// Maps a failed ledger query to `Ledger` with what it was doing.
    pub(crate) fn ledger(context: &'static str) -> impl Fn(rusqlite::Error) -> Self {
        move |source| Self::Ledger { context, source }
    }
}

impl From<rollpoint_proto::key::KeyError> for GatewayError {
    fn from(e: rollpoint_proto::key::KeyError) -> Self {
        Self::BadCaptureKey {
            key: e.key,
            reason: e.reason,
        }
    }
}
