//! What the stages hand each other: the admitted call, a refusal, the reply's chunks, and the
//! clock calls are stamped with.

use std::pin::Pin;
use std::sync::Arc;

use axum::body::Bytes;
use axum::http::StatusCode;
use futures_util::Stream;

use crate::conversation::{Route, Turn};
use crate::gate::Ticket;
use crate::ledger::{CallId, CallStatus, NewCall};
use crate::shared::Recording;
use crate::upstream::Upstream;

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

/// A call past admission, on its way to the model or the ledger's answer.
pub(crate) struct Admitted {
    pub id: CallId,
    /// Its place at the gate: its reply is delivered only while the gate is open.
    pub ticket: Ticket,
    /// Counts the call until its reply is recorded, so a drain waits for it.
    pub recording: Recording,
    pub route: Route,
    /// The request's bytes as the harness sent them.
    pub request: Bytes,
    pub stream: bool,
    /// The model turns of the request, to fingerprint the conversation with the reply.
    pub model_turns: Vec<Turn>,
    /// Where it goes: the upstream of its model, else the default.
    pub upstream: Arc<Upstream>,
    /// Its ledger row, begun by the stage that sends it.
    pub row: NewCall,
}

/// The upstream reply body.
pub(crate) type Chunks = Pin<Box<dyn Stream<Item = reqwest::Result<Bytes>> + Send>>;

/// A chunk for the caller, or the reason the upstream broke off.
pub(crate) type Chunk = Result<Bytes, String>;
