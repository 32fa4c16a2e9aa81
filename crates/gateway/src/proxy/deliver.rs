//! Delivering a reply to the caller through the gate: headers wait until the gate is open,
//! each later chunk waits only if the closer asked to hold tails. The delivering stream reads
//! the upstream itself; whenever it has to wait (gate closed) or the caller leaves, reading
//! passes to a pump task so the reply is still read to its end and recorded. A broken SSE
//! upstream ends the stream with an `error` event naming the call; other bodies are cut.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::Response;
use futures_util::{FutureExt as _, StreamExt as _};
use serde_json::json;
use tokio::sync::mpsc;

use super::record::{Recorder, pump};
use super::reply::{CALL_ID, REPLAYED_FROM, is_hop};
use super::types::{Chunk, Chunks, now_ms};
use crate::gate::Ticket;
use crate::ledger::{self, CallStatus, Replay};
use crate::shared::Shared;

/// Most bytes joined into one write when chunks are already waiting.
const COALESCE_LIMIT: usize = 64 * 1024;

/// Where a reply's chunks come from.
pub(crate) enum Source {
    /// The upstream, read by the delivering stream itself.
    Direct { chunks: Chunks, recorder: Recorder },
    /// A pump task (or a recorded reply) feeding a channel.
    Pumped(mpsc::UnboundedReceiver<Chunk>),
    /// Nothing more.
    Done,
}

impl Source {
    /// Hands reading the upstream to a pump task, so the reply is read and recorded while
    /// nobody delivers it.
    fn detach(&mut self) {
        match std::mem::replace(self, Self::Done) {
            Self::Direct { chunks, recorder } => {
                let (tx, rx) = mpsc::unbounded_channel();
                tokio::spawn(pump(chunks, recorder, Some(tx)));
                *self = Self::Pumped(rx);
            }
            other => *self = other,
        }
    }
}

struct Delivery {
    source: Source,
    /// An error met while joining chunks, for the next pull.
    stashed: Option<Chunk>,
    ticket: Ticket,
    shared: Arc<Shared>,
    call_id: String,
    sse: bool,
    done: bool,
}

impl Drop for Delivery {
    fn drop(&mut self) {
        // The caller left mid-reply: read the rest anyway, for the ledger.
        if let Source::Direct { chunks, recorder } =
            std::mem::replace(&mut self.source, Source::Done)
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            runtime.spawn(pump(chunks, recorder, None));
        }
    }
}

impl Delivery {
    /// The next chunk, after any hold of the tail.
    async fn pull(&mut self) -> Option<Chunk> {
        if let Some(stashed) = self.stashed.take() {
            return Some(stashed);
        }
        let chunk = match &mut self.source {
            Source::Direct { chunks, recorder } => match chunks.next().await {
                Some(Ok(bytes)) => {
                    recorder.push(&bytes);
                    Some(Ok(bytes))
                }
                Some(Err(e)) => Some(Err(recorder.broken(&e))),
                None => None,
            },
            Source::Pumped(rx) => rx.recv().await,
            Source::Done => None,
        };
        let chunk = match chunk {
            Some(Ok(first)) => Some(Ok(self.join_ready(first))),
            other => other,
        };
        if !matches!(chunk, Some(Ok(_))) {
            // The reply ended (or broke): nothing more to read; record it if read here.
            if let Source::Direct { recorder, .. } =
                std::mem::replace(&mut self.source, Source::Done)
            {
                recorder.finish(chunk.as_ref().and_then(|c| c.as_ref().err().cloned()));
            }
        }
        if !self.ticket.tail_flows() {
            self.source.detach();
            self.ticket.tail().await;
        }
        match chunk {
            Some(Ok(first)) => Some(Ok(self.coalesce(first))),
            other => other,
        }
    }

    /// Joins chunks the upstream already sent in the same burst to `first` (recording them),
    /// so a burst costs one write to the caller. Never waits for more.
    fn join_ready(&mut self, first: Bytes) -> Bytes {
        let Source::Direct { chunks, recorder } = &mut self.source else {
            return first;
        };
        let mut joined: Option<bytes::BytesMut> = None;
        let mut end = None;
        while joined.as_ref().map_or(first.len(), bytes::BytesMut::len) < COALESCE_LIMIT {
            match chunks.next().now_or_never() {
                Some(Some(Ok(more))) => {
                    recorder.push(&more);
                    joined
                        .get_or_insert_with(|| bytes::BytesMut::from(&first[..]))
                        .extend_from_slice(&more);
                }
                Some(Some(Err(e))) => {
                    end = Some(Some(recorder.broken(&e)));
                    break;
                }
                Some(None) => {
                    end = Some(None);
                    break;
                }
                None => break,
            }
        }
        if let Some(broken) = end
            && let Source::Direct { recorder, .. } =
                std::mem::replace(&mut self.source, Source::Done)
        {
            self.stashed = broken.clone().map(Err);
            recorder.finish(broken);
        }
        joined.map_or(first, bytes::BytesMut::freeze)
    }

    /// Joins chunks a pump already queued to `first`, so a burst costs one write to the
    /// caller instead of one per chunk. Never waits for more.
    fn coalesce(&mut self, first: Bytes) -> Bytes {
        let Source::Pumped(rx) = &mut self.source else {
            return first;
        };
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
                    if let Err(e) = ledger::delivered(c, &id, ms) {
                        eprintln!("ledger: failed to mark call {id} delivered: {e}");
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

/// Delivers an upstream reply read from `source`.
pub(crate) async fn upstream(
    shared: &Arc<Shared>,
    ticket: Ticket,
    call_id: String,
    status: StatusCode,
    upstream_headers: &HeaderMap,
    sse: bool,
    mut source: Source,
) -> Response {
    if !ticket.try_deliver() {
        // Held: keep reading (and recording) the reply until the gate opens.
        source.detach();
        ticket.deliver().await;
    }
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
        source,
        stashed: None,
        ticket,
        shared: shared.clone(),
        call_id,
        sse,
        done: false,
    };
    response(status, headers, delivery)
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
        source: Source::Pumped(rx),
        stashed: None,
        ticket,
        shared: shared.clone(),
        call_id,
        sse,
        done: false,
    };
    response(status, headers, delivery)
}
