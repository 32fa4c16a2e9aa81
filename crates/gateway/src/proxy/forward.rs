//! Forwarding a call upstream byte-exact, and the pump that records the reply: it reads the
//! upstream to the end whatever the caller does (so a held or abandoned reply is still in the
//! ledger for a later replay) and hands chunks to the delivery side.

use std::sync::Arc;

use axum::body::Bytes;
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::Response;
use futures_util::StreamExt as _;
use tokio::sync::mpsc;

use super::deliver;
use super::now_ms;
use super::reply::{error_response, skip_upstream};
use crate::conversation::{Route, Turn, fingerprint};
use crate::gate::Ticket;
use crate::gateway::Shared;
use crate::ledger::Finish;
use crate::response::read_response;

/// Where and how to send the call.
pub(crate) struct Target {
    pub rest: String,
    pub query: Option<String>,
    pub method: Method,
    pub headers: HeaderMap,
}

/// A chunk for the caller, or the reason the upstream broke off.
pub(crate) type Chunk = Result<Bytes, String>;

/// The admitted call being forwarded.
pub(crate) struct Call {
    pub ticket: Ticket,
    pub call_id: String,
    pub route: Route,
    pub stream: bool,
    /// The model turns of the request, to fingerprint the conversation with the reply.
    pub model_turns: Vec<Turn>,
}

/// Sends `body` upstream and delivers the reply through the gate.
pub(crate) async fn forward(
    shared: &Arc<Shared>,
    call: Call,
    target: Target,
    body: Bytes,
) -> Response {
    let Call {
        ticket,
        call_id,
        route,
        stream,
        model_turns,
    } = call;
    let url = match &target.query {
        Some(q) => format!("{}/{}?{q}", shared.upstream, target.rest),
        None => format!("{}/{}", shared.upstream, target.rest),
    };
    let mut request = shared.client.request(target.method, &url);
    for (name, value) in &target.headers {
        if !skip_upstream(name) {
            request = request.header(name, value);
        }
    }
    let upstream_ms = now_ms();
    let response = match request.body(body).send().await {
        Ok(r) => r,
        Err(e) => {
            let message = format!("upstream {url} unreachable for call {call_id}: {e}");
            let finish = Finish {
                status: "upstream_unreachable",
                http_status: Some(StatusCode::BAD_GATEWAY.as_u16()),
                error: Some(message.clone()),
                upstream_ms: Some(upstream_ms),
                finished_ms: now_ms(),
                ..Finish::default()
            };
            let id = call_id.clone();
            let _ = shared
                .ledger
                .run(move |c| crate::ledger::ops::finish(c, &id, &finish))
                .await;
            return error_response(
                StatusCode::BAD_GATEWAY,
                "upstream_unreachable",
                &message,
                Some(&call_id),
            );
        }
    };
    let status = response.status();
    let headers = response.headers().clone();
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let sse = content_type
        .as_deref()
        .is_some_and(|c| c.starts_with("text/event-stream"));
    let (tx, rx) = mpsc::unbounded_channel::<Chunk>();
    let pump = Pump {
        shared: shared.clone(),
        call_id: call_id.clone(),
        route,
        stream: stream || sse,
        model_turns,
        status,
        content_type,
        upstream_ms,
    };
    tokio::spawn(pump.run(response, tx));
    deliver::upstream(shared, ticket, call_id, status, &headers, sse, rx).await
}

struct Pump {
    shared: Arc<Shared>,
    call_id: String,
    route: Route,
    stream: bool,
    model_turns: Vec<Turn>,
    status: StatusCode,
    content_type: Option<String>,
    upstream_ms: i64,
}

impl Pump {
    async fn run(self, response: reqwest::Response, tx: mpsc::UnboundedSender<Chunk>) {
        let mut body = Vec::new();
        let mut first_byte_ms = None;
        let mut broken = None;
        let mut chunks = response.bytes_stream();
        while let Some(chunk) = chunks.next().await {
            match chunk {
                Ok(bytes) => {
                    first_byte_ms.get_or_insert_with(now_ms);
                    body.extend_from_slice(&bytes);
                    let _ = tx.send(Ok(bytes));
                }
                Err(e) => {
                    let message = format!(
                        "upstream broke off the reply of call {} after {} bytes: {e}",
                        self.call_id,
                        body.len()
                    );
                    let _ = tx.send(Err(message.clone()));
                    broken = Some(message);
                    break;
                }
            }
        }
        drop(tx);
        let view = read_response(self.route, self.stream, &body);
        let output_fp = view.turn.map(|t| {
            let mut turns = self.model_turns;
            turns.push(t);
            fingerprint(&turns)
        });
        let (status, error) = match (&broken, self.status.is_success()) {
            (Some(msg), _) => ("upstream_broken", Some(msg.clone())),
            (None, true) => ("ok", None),
            (None, false) => (
                "upstream_status",
                Some(format!(
                    "upstream answered {} for call {}",
                    self.status, self.call_id
                )),
            ),
        };
        let finish = Finish {
            status,
            http_status: Some(self.status.as_u16()),
            content_type: self.content_type,
            error,
            response: Some(body),
            usage: view.usage,
            output_fp: if status == "ok" { output_fp } else { None },
            upstream_ms: Some(self.upstream_ms),
            first_byte_ms,
            finished_ms: now_ms(),
        };
        let id = self.call_id;
        self.shared.ledger.post(move |c| {
            if let Err(e) = crate::ledger::ops::finish(c, &id, &finish) {
                eprintln!("ledger: failed to record the end of call {id}: {e}");
            }
        });
    }
}
