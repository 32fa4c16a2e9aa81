//! Forwarding a call upstream byte-exact: the request bytes go as they came, from a task of
//! the call's own that no departing caller cancels, and the reply is handed to delivery
//! while its pump records it.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::body::Bytes;
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::Response;

use super::deliver;
use super::record::{Recorder, pump};
use super::reply::{error_response, skip_upstream};
use super::types::{Chunk, now_ms};
use crate::conversation::{Route, Turn};
use crate::gate::Ticket;
use crate::ledger::{self, CallStatus, Finish};
use crate::shared::{Recording, Shared};
use crate::tokens::reply::Capture;
use crate::tokens::{FaultKind, Plan, TokenFault};
use crate::upstream::send::{Outbound, Sent, send};

/// Where and how to send the call.
pub(crate) struct Target {
    pub upstream: Arc<crate::upstream::Upstream>,
    pub rest: String,
    pub query: Option<String>,
    pub method: Method,
    pub headers: HeaderMap,
}

/// The reply header in which an upstream may name the version of the weights that answered.
pub(crate) const POLICY_VERSION_HEADER: &str = "x-policy-version";

/// The admitted call being forwarded.
pub(crate) struct Call {
    pub ticket: Ticket,
    /// Counts the call until its reply is recorded.
    pub recording: Recording,
    pub call_id: String,
    pub route: Route,
    pub stream: bool,
    /// The model turns of the request, to fingerprint the conversation with the reply.
    pub model_turns: Vec<Turn>,
    pub tokens: Plan,
    /// The attempt key and rollout of the call, for stalls and stickiness.
    pub attempt: String,
    pub rollout: String,
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
        recording,
        call_id,
        route,
        stream,
        model_turns,
        tokens,
        attempt,
        rollout,
    } = call;
    let path = match &target.query {
        Some(q) => format!("{}?{q}", target.rest),
        None => target.rest.clone(),
    };
    let mut headers = axum::http::HeaderMap::with_capacity(target.headers.len());
    for (name, value) in &target.headers {
        if !skip_upstream(name) {
            headers.append(name, value.clone());
        }
    }
    if let Some(credential) = &target.upstream.credential {
        credential.apply(route, &mut headers);
    }
    let outbound = Outbound {
        method: target.method,
        path,
        headers,
        body,
    };
    let upstream_ms = now_ms();
    let (head_tx, head_rx) = tokio::sync::oneshot::channel();
    // The upstream call runs as a task of its own: a caller that leaves (or whose sandbox is
    // swept) before the reply starts does not cancel a call the model is already answering;
    // it is read to its end and recorded all the same.
    let sending = UpstreamCall {
        target: Arc::clone(&target.upstream),
        shared: shared.clone(),
        call_id: call_id.clone(),
        route,
        stream,
        model_turns,
        upstream_ms,
        recording,
        tokens,
        attempt,
        rollout,
    };
    tokio::spawn(tracing::Instrument::instrument(
        sending.run(outbound, head_tx),
        tracing::Span::current(),
    ));
    match head_rx.await {
        Ok(Ok(head)) => {
            deliver::upstream(
                shared,
                ticket,
                call_id,
                head.status,
                &head.headers,
                head.sse,
                head.chunks,
            )
            .await
        }
        Ok(Err(message)) => error_response(
            StatusCode::BAD_GATEWAY,
            CallStatus::UpstreamUnreachable.as_str(),
            &message,
            Some(&call_id),
        ),
        Err(_) => error_response(
            StatusCode::INTERNAL_SERVER_ERROR,
            CallStatus::UpstreamBroken.as_str(),
            &format!("the upstream task of call {call_id} ended without a reply"),
            Some(&call_id),
        ),
    }
}

/// The start of an upstream reply, for delivery.
struct Head {
    status: StatusCode,
    headers: HeaderMap,
    sse: bool,
    chunks: tokio::sync::mpsc::UnboundedReceiver<Chunk>,
}

/// One call on its way upstream.
struct UpstreamCall {
    target: Arc<crate::upstream::Upstream>,
    shared: Arc<Shared>,
    call_id: String,
    route: Route,
    stream: bool,
    model_turns: Vec<Turn>,
    upstream_ms: i64,
    recording: Recording,
    tokens: Plan,
    attempt: String,
    rollout: String,
}

impl UpstreamCall {
    /// Sends the call, hands the reply's head to `head` and pumps the reply to its end.
    async fn run(
        self,
        outbound: Outbound,
        head: tokio::sync::oneshot::Sender<Result<Head, String>>,
    ) {
        let Self {
            target,
            shared,
            call_id,
            route,
            stream,
            model_turns,
            upstream_ms,
            recording,
            tokens,
            attempt,
            rollout,
        } = self;
        // The turn and the replica's lease are held until the reply is read to its end.
        let _turn = target.turn().await;
        let policy_version;
        let sent = send(&shared, &target, &outbound, &attempt, &rollout, &call_id).await;
        let (status, mut headers, chunks, _lease) = match sent {
            Sent::Reply {
                status,
                headers,
                chunks,
                lease,
                version,
            } => {
                // The upstream's own word for the weights that answered wins.
                let named = headers
                    .get(POLICY_VERSION_HEADER)
                    .and_then(|v| v.to_str().ok())
                    .filter(|v| rollpoint_proto::limits::name_problem(v).is_none())
                    .map(str::to_owned);
                policy_version = named.or(version);
                (status, headers, chunks, lease)
            }
            Sent::Failed { message } => {
                let finish = Finish {
                    http_status: Some(StatusCode::BAD_GATEWAY.as_u16()),
                    error: Some(message.clone()),
                    upstream_ms: Some(upstream_ms),
                    ..Finish::ended(CallStatus::UpstreamUnreachable, now_ms())
                };
                let id = call_id.clone();
                if let Err(e) = shared
                    .ledger
                    .run_committed(move |c| ledger::finish(c, &id, &finish))
                    .await
                {
                    tracing::error!(call = %call_id, error = %e, "ledger: failed to record the end of the call");
                }
                drop(recording);
                shared
                    .metrics
                    .ended(CallStatus::UpstreamUnreachable.as_str());
                let _gone = head.send(Err(message));
                return;
            }
        };
        let content_type = headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let sse = content_type
            .as_deref()
            .is_some_and(|c| c.starts_with("text/event-stream"));
        let (capture, captured) = match tokens {
            Plan::Off => (None, None),
            Plan::Unsupported => (
                None,
                Some(Err(TokenFault::new(
                    FaultKind::Unsupported,
                    format!(
                        "call {call_id}: capture does not cover route {}",
                        route.name()
                    ),
                ))),
            ),
            Plan::Asked(added) => (
                Some(Capture::new(
                    route,
                    added,
                    sse,
                    status.is_success(),
                    &call_id,
                )),
                None,
            ),
        };
        if capture.is_some() {
            // The caller gets the reply less what capture added: its own length.
            headers.remove(header::CONTENT_LENGTH);
        }
        let recorder = Recorder {
            shared,
            call_id,
            route,
            stream: stream || sse,
            model_turns,
            status,
            content_type,
            upstream_ms,
            body: Vec::new(),
            first_byte_ms: None,
            recording,
            tokens: captured,
            policy_version,
        };
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let _gone = head.send(Ok(Head {
            status,
            headers,
            sse,
            chunks: rx,
        }));
        if let Some(listed) = pump(chunks, recorder, tx, capture).await {
            target.lists_token_ids.store(listed, Ordering::Relaxed);
        }
    }
}
