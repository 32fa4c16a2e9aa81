//! Recording a reply while it streams: the bytes so far, and at its end the ledger's finish
//! (status, usage, output fingerprint). The reply is read either by the delivering stream
//! itself or, when nobody can deliver it (gate closed, caller gone), by a pump task that reads
//! it to the end, so every reply that the upstream completes is in the ledger.

use std::sync::Arc;

use axum::body::Bytes;
use axum::http::StatusCode;
use futures_util::StreamExt as _;
use tokio::sync::mpsc;

use super::types::{Chunk, Chunks, now_ms};
use crate::conversation::{Route, Turn, fingerprint};
use crate::ledger::{self, CallStatus, Finish};
use crate::response::read_response;
use crate::shared::Shared;

/// One reply being recorded.
pub(crate) struct Recorder {
    pub shared: Arc<Shared>,
    pub call_id: String,
    pub route: Route,
    pub stream: bool,
    pub model_turns: Vec<Turn>,
    pub status: StatusCode,
    pub content_type: Option<String>,
    pub upstream_ms: i64,
    pub body: Vec<u8>,
    pub first_byte_ms: Option<i64>,
}

impl Recorder {
    pub(crate) fn push(&mut self, bytes: &Bytes) {
        self.first_byte_ms.get_or_insert_with(now_ms);
        self.body.extend_from_slice(bytes);
    }

    pub(crate) fn broken(&self, e: &reqwest::Error) -> String {
        format!(
            "upstream broke off the reply of call {} after {} bytes: {e}",
            self.call_id,
            self.body.len()
        )
    }

    /// Records the end of the reply; `broken` says why it ended early. Reading the reply for
    /// usage and lineage runs as a task of its own, off the delivery path.
    pub(crate) fn finish(self, broken: Option<String>) {
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(async move { self.record(broken) });
            }
            Err(_) => self.record(broken),
        }
    }

    fn record(self, broken: Option<String>) {
        let view = read_response(self.route, self.stream, &self.body);
        let (status, error) = match (broken, self.status.is_success()) {
            (Some(msg), _) => (CallStatus::UpstreamBroken, Some(msg)),
            (None, true) => (CallStatus::Ok, None),
            (None, false) => (
                CallStatus::UpstreamStatus,
                Some(format!(
                    "upstream answered {} for call {}",
                    self.status, self.call_id
                )),
            ),
        };
        let output_fp = (status == CallStatus::Ok)
            .then_some(view.turn)
            .flatten()
            .map(|t| {
                let mut turns = self.model_turns;
                turns.push(t);
                fingerprint(&turns)
            });
        let finish = Finish {
            status,
            http_status: Some(self.status.as_u16()),
            content_type: self.content_type,
            error,
            response: Some(self.body),
            usage: view.usage,
            output_fp,
            upstream_ms: Some(self.upstream_ms),
            first_byte_ms: self.first_byte_ms,
            finished_ms: now_ms(),
        };
        let id = self.call_id;
        self.shared.ledger.post(move |c| {
            if let Err(e) = ledger::finish(c, &id, &finish) {
                eprintln!("ledger: failed to record the end of call {id}: {e}");
            }
        });
    }
}

/// Reads the rest of `chunks` into `recorder`, handing each chunk to `tx` if there is one
/// (and ignoring a caller that left), then records the end.
pub(crate) async fn pump(
    mut chunks: Chunks,
    mut recorder: Recorder,
    tx: Option<mpsc::UnboundedSender<Chunk>>,
) {
    while let Some(chunk) = chunks.next().await {
        match chunk {
            Ok(bytes) => {
                recorder.push(&bytes);
                if let Some(tx) = &tx {
                    let _ = tx.send(Ok(bytes));
                }
            }
            Err(e) => {
                let message = recorder.broken(&e);
                if let Some(tx) = &tx {
                    let _ = tx.send(Err(message.clone()));
                }
                drop(tx);
                recorder.finish(Some(message));
                return;
            }
        }
    }
    drop(tx);
    recorder.finish(None);
}
