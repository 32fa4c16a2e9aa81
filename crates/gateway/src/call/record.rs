//! Stage 6, record: a reply recorded while it streams: the bytes so far, and at its end the ledger's finish
//! (status, usage, output fingerprint). A pump task reads every reply to its end whatever the
//! caller does (gate closed, caller slow, frozen or gone), so every reply the upstream
//! completes is in the ledger. The pump keeps one chunk in hand and sends it on only when the
//! next arrives, and the last one only once the reply is committed: a caller never holds the
//! end of a reply the ledger could lose. The cost is one chunk's gap of latency per chunk.

use std::sync::Arc;

use axum::body::Bytes;
use axum::http::StatusCode;
use futures_util::StreamExt as _;
use tokio::sync::mpsc;

use super::types::{Chunk, Chunks, now_ms};
use crate::conversation::{Route, Turn, fingerprint};
use crate::ledger::{self, CallId, CallStatus, Finish};
use crate::response::read_response;
use crate::shared::{Recording, Shared};
use crate::tokens::Captured;
use crate::tokens::reply::Capture;

/// One reply being recorded.
pub(crate) struct Recorder {
    pub shared: Arc<Shared>,
    pub id: CallId,
    pub route: Route,
    pub stream: bool,
    pub model_turns: Vec<Turn>,
    pub status: StatusCode,
    pub content_type: Option<String>,
    pub upstream_ms: i64,
    pub body: Vec<u8>,
    pub first_byte_ms: Option<i64>,
    /// Held until the reply is committed.
    pub recording: Recording,
    /// The call's tokens or why it has none, when capture is on.
    pub tokens: Option<Captured>,
    /// The version of the weights that answered it.
    pub policy_version: Option<String>,
}

impl Recorder {
    pub(crate) fn push(&mut self, bytes: &Bytes) {
        self.first_byte_ms.get_or_insert_with(now_ms);
        self.body.extend_from_slice(bytes);
    }

    pub(crate) fn broken(&self, e: &reqwest::Error) -> String {
        format!(
            "upstream broke off the reply of call {} after {} bytes: {e}",
            self.id,
            self.body.len()
        )
    }

    /// Records the end of the reply (`broken` says why it ended early) and returns once it
    /// is committed.
    pub(crate) async fn finish(self, broken: Option<String>) {
        let view = read_response(self.route, self.stream, &self.body);
        let (status, error) = match (broken, self.status.is_success()) {
            (Some(msg), _) => (CallStatus::UpstreamBroken, Some(msg)),
            (None, true) => (CallStatus::Ok, None),
            (None, false) => (
                CallStatus::UpstreamStatus,
                Some(format!(
                    "upstream answered {} for call {}",
                    self.status, self.id
                )),
            ),
        };
        self.shared.metrics.ended(status.as_str());
        let seconds = (now_ms() - self.upstream_ms).max(0) as f64 / 1000.0;
        tracing::debug!(
            status = status.as_str(),
            http_status = self.status.as_u16(),
            seconds,
            "call answered upstream"
        );
        self.shared.metrics.answered(seconds, view.usage.as_ref());
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
            tokens: self.tokens,
            policy_version: self.policy_version,
        };
        commit(&self.shared, &self.id, finish).await;
        drop(self.recording);
    }
}

/// Commits how call `id` ended and returns once it is durable; a ledger that refuses it is
/// logged (the caller's reply does not depend on it).
pub(crate) async fn commit(shared: &Shared, id: &CallId, finish: Finish) {
    let row = id.clone();
    let committed = shared
        .ledger
        .run_committed(move |c| ledger::finish(c, &row, &finish))
        .await;
    if let Err(e) = committed {
        tracing::error!(call = %id, error = %e, "ledger: failed to record the end of the call");
    }
}

/// Reads `chunks` to the end into `recorder`, sending each chunk to `tx` once the next one
/// is read, and the last (or the reason the upstream broke off) once the reply is committed.
/// A caller that left is ignored: the reply is still read and recorded. Returns, for a
/// captured chat reply that came whole, whether it listed `token_ids`.
pub(crate) async fn pump(
    mut chunks: Chunks,
    mut recorder: Recorder,
    tx: mpsc::UnboundedSender<Chunk>,
    mut capture: Option<Capture>,
) -> Option<bool> {
    let mut held: Option<Bytes> = None;
    let mut pass = |recorder: &mut Recorder, bytes: Bytes| {
        recorder.push(&bytes);
        if let Some(previous) = held.replace(bytes) {
            let _gone = tx.send(Ok(previous));
        }
    };
    let broken = loop {
        match chunks.next().await {
            // With capture on, what passes is the reply less the token fields, event by event.
            Some(Ok(bytes)) => match capture.as_mut() {
                Some(c) => {
                    if let Some(visible) = c.feed(&bytes) {
                        pass(&mut recorder, visible);
                    }
                }
                None => pass(&mut recorder, bytes),
            },
            Some(Err(e)) => break Some(recorder.broken(&e)),
            None => break None,
        }
    };
    // Whether a whole chat reply listed `token_ids`: what the next request need ask for.
    let mut listed = None;
    if let Some(mut c) = capture {
        let rest = c.rest();
        if broken.is_none() {
            listed = c.listed_token_ids();
        }
        let captured = c.captured(broken.is_some());
        if let Some(rest) = rest {
            pass(&mut recorder, rest);
        }
        recorder.tokens = Some(captured);
    }
    recorder.finish(broken.clone()).await;
    if let Some(last) = held {
        let _gone = tx.send(Ok(last));
    }
    if let Some(message) = broken {
        let _gone = tx.send(Err(message));
    }
    listed
}
