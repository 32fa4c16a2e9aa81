//! Forwarding a call upstream byte-exact: the request bytes go as they came, and the reply
//! is handed to delivery together with its recorder.

use std::sync::Arc;

use axum::body::Bytes;
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::Response;

use super::deliver;
use super::record::{Recorder, pump};
use super::reply::{error_response, skip_upstream};
use super::types::now_ms;
use crate::conversation::{Route, Turn};
use crate::gate::Ticket;
use crate::ledger::{self, CallStatus, Finish};
use crate::shared::Shared;

/// Where and how to send the call.
pub(crate) struct Target {
    pub rest: String,
    pub query: Option<String>,
    pub method: Method,
    pub headers: HeaderMap,
}

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
    let recording = shared.start_recording();
    let response = match request.body(body).send().await {
        Ok(r) => r,
        Err(e) => {
            let message = format!("upstream {url} unreachable for call {call_id}: {e}");
            let finish = Finish {
                http_status: Some(StatusCode::BAD_GATEWAY.as_u16()),
                error: Some(message.clone()),
                upstream_ms: Some(upstream_ms),
                ..Finish::ended(CallStatus::UpstreamUnreachable, now_ms())
            };
            let id = call_id.clone();
            let _ = shared
                .ledger
                .run_committed(move |c| ledger::finish(c, &id, &finish))
                .await;
            drop(recording);
            return error_response(
                StatusCode::BAD_GATEWAY,
                CallStatus::UpstreamUnreachable.as_str(),
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
    let recorder = Recorder {
        shared: shared.clone(),
        call_id: call_id.clone(),
        route,
        stream: stream || sse,
        model_turns,
        status,
        content_type,
        upstream_ms,
        body: Vec::new(),
        first_byte_ms: None,
        recording,
    };
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(pump(Box::pin(response.bytes_stream()), recorder, tx));
    deliver::upstream(shared, ticket, call_id, status, &headers, sse, rx).await
}
