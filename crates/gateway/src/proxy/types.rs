//! What the proxy's files share: a refusal, the reply's chunks, and the clock calls are
//! stamped with.

use std::pin::Pin;

use axum::body::Bytes;
use axum::http::StatusCode;
use futures_util::Stream;

use crate::ledger::CallStatus;

/// [`rollpoint_proto::clock::unix_ms`] as the ledger's signed column holds it.
pub(crate) fn now_ms() -> i64 {
    i64::try_from(rollpoint_proto::clock::unix_ms()).unwrap_or(i64::MAX)
}

/// Why a request is refused before it becomes a call.
pub(crate) struct Refusal {
    pub status: StatusCode,
    /// The row's status, named as the error type of the reply.
    pub code: CallStatus,
    pub message: String,
}

impl Refusal {
    pub(crate) fn new(status: StatusCode, code: CallStatus, message: String) -> Self {
        Self {
            status,
            code,
            message,
        }
    }
}

/// The upstream reply body.
pub(crate) type Chunks = Pin<Box<dyn Stream<Item = reqwest::Result<Bytes>> + Send>>;

/// A chunk for the caller, or the reason the upstream broke off.
pub(crate) type Chunk = Result<Bytes, String>;
