//! Delivering a reply to the caller through the gate: headers wait until the gate is open,
//! each later chunk waits only if the closer asked to hold tails. A broken SSE upstream ends
//! the stream with an `error` event naming the call; other bodies are cut.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::Response;
use serde_json::json;
use tokio::sync::mpsc;

use super::forward::Chunk;
use super::now_ms;
use super::reply::{CALL_ID, REPLAYED_FROM, is_hop};
use crate::gate::Ticket;
use crate::gateway::Shared;
use crate::ledger::Replay;

/// Most bytes joined into one write when chunks are already waiting.
const COALESCE_LIMIT: usize = 64 * 1024;

struct Delivery {
    rx: mpsc::UnboundedReceiver<Chunk>,
    /// A chunk received while coalescing, for the next poll.
    stashed: Option<Chunk>,
    ticket: Ticket,
    shared: Arc<Shared>,
    call_id: String,
    sse: bool,
    done: bool,
}

impl Delivery {
    async fn next(mut self) -> Option<(Result<Bytes, std::io::Error>, Self)> {
        if self.done {
            return None;
        }
        let item = match self.stashed.take() {
            Some(chunk) => Some(chunk),
            None => self.rx.recv().await,
        };
        self.ticket.tail().await;
        match item {
            Some(Ok(bytes)) => {
                let bytes = self.coalesce(bytes);
                Some((Ok(bytes), self))
            }
            Some(Err(message)) => {
                self.done = true;
                if self.sse {
                    let data = json!({"type": "error", "error": {"type": "upstream_broken",
                        "message": message, "call_id": self.call_id}});
                    let event = format!("event: error\ndata: {data}\n\n");
                    Some((Ok(Bytes::from(event)), self))
                } else {
                    Some((Err(std::io::Error::other(message)), self))
                }
            }
            None => {
                let id = std::mem::take(&mut self.call_id);
                let ms = now_ms();
                self.shared.ledger.post(move |c| {
                    if let Err(e) = crate::ledger::ops::delivered(c, &id, ms) {
                        eprintln!("ledger: failed to mark call {id} delivered: {e}");
                    }
                });
                None
            }
        }
    }
}

impl Delivery {
    /// Joins chunks that are already waiting to `first`, so a burst from the upstream costs
    /// one write to the caller instead of one per chunk. Never waits for more.
    fn coalesce(&mut self, first: Bytes) -> Bytes {
        let mut joined: Option<bytes::BytesMut> = None;
        while joined.as_ref().map_or(first.len(), bytes::BytesMut::len) < COALESCE_LIMIT {
            match self.rx.try_recv() {
                Ok(Ok(more)) => joined
                    .get_or_insert_with(|| bytes::BytesMut::from(&first[..]))
                    .extend_from_slice(&more),
                Ok(Err(e)) => {
                    self.stashed = Some(Err(e));
                    break;
                }
                Err(_) => break,
            }
        }
        joined.map_or(first, bytes::BytesMut::freeze)
    }
}

fn stream_body(d: Delivery) -> Body {
    Body::from_stream(futures_util::stream::unfold(d, Delivery::next))
}

/// Delivers an upstream reply whose chunks arrive on `rx`.
pub(crate) async fn upstream(
    shared: &Arc<Shared>,
    ticket: Ticket,
    call_id: String,
    status: StatusCode,
    upstream_headers: &HeaderMap,
    sse: bool,
    rx: mpsc::UnboundedReceiver<Chunk>,
) -> Response {
    ticket.deliver().await;
    let mut headers = HeaderMap::with_capacity(upstream_headers.len() + 1);
    for (name, value) in upstream_headers {
        if !is_hop(name) {
            headers.append(name, value.clone());
        }
    }
    if let Ok(v) = HeaderValue::from_str(&call_id) {
        headers.insert(CALL_ID, v);
    }
    let delivery = Delivery {
        rx,
        ticket,
        shared: shared.clone(),
        call_id,
        sse,
        done: false,
        stashed: None,
    };
    let mut resp = Response::new(stream_body(delivery));
    *resp.status_mut() = status;
    *resp.headers_mut() = headers;
    resp
}

/// Delivers a recorded reply, event by event if it was a stream.
pub(crate) async fn replay(
    shared: &Arc<Shared>,
    ticket: Ticket,
    call_id: String,
    replay: Replay,
) -> Response {
    ticket.deliver().await;
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
    if let Ok(v) = HeaderValue::from_str(&call_id) {
        headers.insert(CALL_ID, v);
    }
    if let Ok(v) = HeaderValue::from_str(&replay.source_call_id) {
        headers.insert(REPLAYED_FROM, v);
    }
    let status = StatusCode::from_u16(replay.http_status).unwrap_or(StatusCode::OK);
    let delivery = Delivery {
        rx,
        ticket,
        shared: shared.clone(),
        call_id,
        sse,
        done: false,
        stashed: None,
    };
    let mut resp = Response::new(stream_body(delivery));
    *resp.status_mut() = status;
    *resp.headers_mut() = headers;
    resp
}
