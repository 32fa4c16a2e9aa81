//! Stage 7, deliver: a reply reaches the caller through the gate: headers wait until the gate is open,
//! each later chunk waits only if the closer asked to hold tails. The reply's chunks come from
//! its pump (which reads and records the upstream reply to its end whatever the caller does)
//! or from the ledger (a replay). A broken SSE upstream ends the stream with an `error` event
//! naming the call; other bodies are cut.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::Response;
use serde_json::json;
use tokio::sync::mpsc;

use super::reply::{CALL_ID, REPLAYED_FROM, is_hop};
use super::types::{Chunk, now_ms};
use crate::gate::Ticket;
use crate::ledger::{self, CallId, CallStatus, Replay};
use crate::shared::Shared;

/// Most bytes joined into one write when chunks are already waiting.
const COALESCE_LIMIT: usize = 64 * 1024;

struct Delivery {
    chunks: mpsc::UnboundedReceiver<Chunk>,
    /// An error met while joining chunks, for the next pull.
    stashed: Option<Chunk>,
    ticket: Ticket,
    shared: Arc<Shared>,
    id: CallId,
    sse: bool,
    done: bool,
}

impl Delivery {
    fn new(
        chunks: mpsc::UnboundedReceiver<Chunk>,
        ticket: Ticket,
        shared: &Arc<Shared>,
        id: CallId,
        sse: bool,
    ) -> Self {
        Self {
            chunks,
            stashed: None,
            ticket,
            shared: Arc::clone(shared),
            id,
            sse,
            done: false,
        }
    }

    /// The next chunk, after any hold of the tail.
    async fn pull(&mut self) -> Option<Chunk> {
        if let Some(stashed) = self.stashed.take() {
            return Some(stashed);
        }
        let chunk = self.chunks.recv().await;
        if !self.ticket.tail_flows() {
            self.ticket.tail().await;
        }
        match chunk {
            Some(Ok(first)) => Some(Ok(self.coalesce(first))),
            other => other,
        }
    }

    /// Joins chunks a pump already queued to `first`, so a burst costs one write to the
    /// caller instead of one per chunk. Never waits for more.
    fn coalesce(&mut self, first: Bytes) -> Bytes {
        let rx = &mut self.chunks;
        let stashed = &mut self.stashed;
        let mut joined: Option<bytes::BytesMut> = None;
        while joined.as_ref().map_or(first.len(), bytes::BytesMut::len) < COALESCE_LIMIT {
            match rx.try_recv() {
                Ok(Ok(more)) => joined
                    .get_or_insert_with(|| bytes::BytesMut::from(&first[..]))
                    .extend_from_slice(&more),
                Ok(Err(e)) => {
                    *stashed = Some(Err(e));
                    break;
                }
                Err(_) => break,
            }
        }
        joined.map_or(first, bytes::BytesMut::freeze)
    }

    async fn next(mut self) -> Option<(Result<Bytes, std::io::Error>, Self)> {
        if self.done {
            return None;
        }
        match self.pull().await {
            Some(Ok(bytes)) => Some((Ok(bytes), self)),
            Some(Err(message)) => {
                self.done = true;
                if self.sse {
                    let data = json!({"type": "error", "error": {"type": CallStatus::UpstreamBroken.as_str(),
                        "message": message, "call_id": self.id.to_string()}});
                    let event = format!("event: error\ndata: {data}\n\n");
                    Some((Ok(Bytes::from(event)), self))
                } else {
                    Some((Err(std::io::Error::other(message)), self))
                }
            }
            None => {
                let id = self.id.clone();
                let ms = now_ms();
                self.shared.ledger.post(move |c| {
                    if let Err(e) = ledger::delivered(c, &id, ms) {
                        tracing::error!(call = %id, error = %e, "ledger: failed to mark the call delivered");
                    }
                });
                None
            }
        }
    }
}

fn stream_body(d: Delivery) -> Body {
    Body::from_stream(futures_util::stream::unfold(d, Delivery::next))
}

fn response(status: StatusCode, headers: HeaderMap, delivery: Delivery) -> Response {
    let mut resp = Response::new(stream_body(delivery));
    *resp.status_mut() = status;
    *resp.headers_mut() = headers;
    resp
}

/// Delivers an upstream reply its pump sends on `chunks`.
pub(crate) async fn upstream(
    shared: &Arc<Shared>,
    ticket: Ticket,
    id: CallId,
    status: StatusCode,
    upstream_headers: &HeaderMap,
    sse: bool,
    chunks: mpsc::UnboundedReceiver<Chunk>,
) -> Response {
    if !ticket.try_deliver() {
        // Held until the gate opens; the pump goes on reading and recording the reply.
        ticket.deliver().await;
    }
    let mut headers = HeaderMap::with_capacity(upstream_headers.len() + 1);
    for (name, value) in upstream_headers {
        if !is_hop(name) {
            headers.append(name, value.clone());
        }
    }
    if let Ok(v) = HeaderValue::from_str(&id.to_string()) {
        headers.insert(CALL_ID, v);
    }
    let delivery = Delivery::new(chunks, ticket, shared, id, sse);
    response(status, headers, delivery)
}

/// Delivers a recorded reply, event by event if it was a stream.
pub(crate) async fn replay(
    shared: &Arc<Shared>,
    ticket: Ticket,
    id: CallId,
    replay: Replay,
) -> Response {
    ticket.deliver().await;
    shared.metrics.ended(CallStatus::Replayed.as_str());
    tracing::debug!(from = %replay.source_call_id, "call replayed from the ledger");
    let sse = replay
        .content_type
        .as_deref()
        .is_some_and(|c| c.starts_with("text/event-stream"));
    let (tx, rx) = mpsc::unbounded_channel();
    let body = Bytes::from(replay.body);
    if sse {
        let mut start = 0;
        for (i, w) in body.windows(2).enumerate() {
            if w == b"\n\n" {
                let _ = tx.send(Ok(body.slice(start..i + 2)));
                start = i + 2;
            }
        }
        if start < body.len() {
            let _ = tx.send(Ok(body.slice(start..)));
        }
    } else {
        let _ = tx.send(Ok(body));
    }
    drop(tx);
    let mut headers = HeaderMap::new();
    if let Some(v) = replay
        .content_type
        .as_deref()
        .and_then(|c| HeaderValue::from_str(c).ok())
    {
        headers.insert(header::CONTENT_TYPE, v);
    }
    if let Ok(v) = HeaderValue::from_str(&id.to_string()) {
        headers.insert(CALL_ID, v);
    }
    if let Ok(v) = HeaderValue::from_str(&replay.source_call_id) {
        headers.insert(REPLAYED_FROM, v);
    }
    let status = StatusCode::from_u16(replay.http_status).unwrap_or(StatusCode::OK);
    let delivery = Delivery::new(rx, ticket, shared, id, sse);
    response(status, headers, delivery)
}
