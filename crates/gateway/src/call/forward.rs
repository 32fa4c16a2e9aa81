//! Stage 5, forward: the call goes upstream byte-exact (the request bytes as they came, with
//! token capture's fields added when it is on), from a task of the call's own that no
//! departing caller cancels, and the reply is handed to delivery while its pump records it.
//! A call the ledger can answer (a repeat after a restore) is replayed instead.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::body::Bytes;
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::Response;

use super::admit;
use super::deliver;
use super::record::{Recorder, commit, pump};
use super::reply::{error_response, skip_upstream};
use super::send::{Outbound, Sent, send};
use super::types::{Admitted, Chunk, now_ms};
use crate::conversation::{Route, Turn};
use crate::ledger::{self, CallId, CallStatus, Finish};
use crate::shared::{Recording, Shared};
use crate::tokens::ask::{Wanted, ask};
use crate::tokens::reply::Capture;
use crate::tokens::{FaultKind, Plan, TokenFault, TokenSource};
use crate::upstream::Upstream;

/// Sends `call` upstream (or answers it from the ledger) and delivers the reply through the
/// gate. `parts` are the request's method, path and headers; `rest` its path below the key.
pub(crate) async fn call(
    shared: &Arc<Shared>,
    call: Admitted,
    parts: Parts,
    rest: &str,
) -> Response {
    let Admitted {
        id,
        ticket,
        recording,
        route,
        request,
        stream,
        model_turns,
        upstream,
        row,
    } = call;
    // With capture on the upstream gets the request with the token fields added; the ledger
    // keeps the harness's bytes.
    let (body, tokens) = token_plan(shared, &upstream, route, request);
    // Only a call that may repeat a recorded one waits for its row: the ledger may answer it.
    if row.replay {
        match admit::begin(shared, row).await {
            Ok(ledger::Begun {
                replay: Some(r), ..
            }) => return deliver::replay(shared, ticket, id, r).await,
            Ok(_) => {}
            Err(refused) => return refused,
        }
    } else {
        admit::post(shared, row);
    }
    let path = match parts.uri.query() {
        Some(q) => format!("{rest}?{q}"),
        None => rest.to_owned(),
    };
    let mut headers = HeaderMap::with_capacity(parts.headers.len());
    for (name, value) in &parts.headers {
        if !skip_upstream(name) {
            headers.append(name, value.clone());
        }
    }
    if let Some(credential) = &upstream.credential {
        credential.apply(route, &mut headers);
    }
    let outbound = Outbound {
        method: parts.method,
        path,
        headers,
        body,
    };
    let (head_tx, head_rx) = tokio::sync::oneshot::channel();
    // The upstream call runs as a task of its own: a caller that leaves (or whose sandbox is
    // swept) before the reply starts does not cancel a call the model is already answering;
    // it is read to its end and recorded all the same.
    let sending = UpstreamCall {
        target: upstream,
        shared: shared.clone(),
        id: id.clone(),
        route,
        stream,
        model_turns,
        upstream_ms: now_ms(),
        recording,
        tokens,
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
                id,
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
            Some(&id.to_string()),
        ),
        Err(_) => error_response(
            StatusCode::INTERNAL_SERVER_ERROR,
            CallStatus::UpstreamBroken.as_str(),
            &format!("the upstream task of call {id} ended without a reply"),
            Some(&id.to_string()),
        ),
    }
}

/// The body the upstream gets, and what token capture does with the reply.
fn token_plan(shared: &Shared, upstream: &Upstream, route: Route, request: Bytes) -> (Bytes, Plan) {
    if shared.config.tokens != Some(TokenSource::Vllm) || route == Route::Models {
        return (request, Plan::Off);
    }
    let wanted = Wanted {
        logprobs: shared.config.token_logprobs,
        logprob_ids: !upstream.lists_token_ids.load(Ordering::Relaxed),
    };
    match ask(route, &request, wanted) {
        Some((body, added)) => (body, Plan::Asked(added)),
        None => (request, Plan::Unsupported),
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
    target: Arc<Upstream>,
    shared: Arc<Shared>,
    id: CallId,
    route: Route,
    stream: bool,
    model_turns: Vec<Turn>,
    upstream_ms: i64,
    recording: Recording,
    tokens: Plan,
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
            id,
            route,
            stream,
            model_turns,
            upstream_ms,
            recording,
            tokens,
        } = self;
        // The turn and the replica's lease are held until the reply is read to its end.
        let _turn = target.turn().await;
        let sent = send(&shared, &target, &outbound, &id).await;
        let (status, mut headers, chunks, _lease, policy_version) = match sent {
            Sent::Reply {
                status,
                headers,
                chunks,
                lease,
                version,
            } => (status, headers, chunks, lease, version),
            Sent::Failed { message } => {
                let finish = Finish {
                    http_status: Some(StatusCode::BAD_GATEWAY.as_u16()),
                    error: Some(message.clone()),
                    upstream_ms: Some(upstream_ms),
                    ..Finish::ended(CallStatus::UpstreamUnreachable, now_ms())
                };
                commit(&shared, &id, finish).await;
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
                    format!("call {id}: capture does not cover route {}", route.name()),
                ))),
            ),
            Plan::Asked(added) => (
                Some(Capture::new(
                    route,
                    added,
                    sse,
                    status.is_success(),
                    &id.to_string(),
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
            id,
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
