//! The proxy path of one request: route and key checks, bounded body read, admission through
//! the gate, the ledger row, then either a replay from the ledger or a byte-exact forward
//! upstream with the reply held until the gate is open.

pub(crate) mod deliver;
pub(crate) mod forward;
mod record;
pub(crate) mod reply;
pub(crate) mod types;

use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::body::{Body, Bytes};
use axum::extract::{Path, Request, State};
use axum::http::StatusCode;
use axum::response::Response;
use futures_util::StreamExt as _;

use self::reply::{error_response, ledger_refused};
use self::types::{Refusal, now_ms};
use crate::attach::AttachedSandbox;
use crate::capture::CaptureKey;
use crate::conversation::{RequestView, Route, read_request};
use crate::ledger::{self, Begun, CallStatus, NewCall, Rejected};
use crate::shared::Shared;
use crate::tokens::Plan;
use crate::tokens::ask::{Wanted, ask};
use crate::upstream::Upstream;

/// A request that passed every check.
struct Checked {
    route: Route,
    key: CaptureKey,
    bytes: Bytes,
    view: Option<RequestView>,
    /// Where it goes: the upstream of its model, else the default.
    upstream: Arc<Upstream>,
}

/// `ANY /r/{key}/{*rest}`, `{key}` being `<attempt key>` or
/// `<attempt key>@<secret>`. The secret is checked here and goes no further:
/// no log, span or ledger row sees it.
pub(crate) async fn handle(
    State(shared): State<Arc<Shared>>,
    Path((segment, rest)): Path<(String, String)>,
    req: Request,
) -> Response {
    let (key, secret) = rollpoint_proto::route::split(&segment);
    let sandbox = req
        .extensions()
        .get::<AttachedSandbox>()
        .map(|s| s.0.as_str());
    if let Some(refused) = forbidden(&shared, key, secret, sandbox) {
        return refused;
    }
    call(shared, key.to_owned(), rest, req).await
}

/// 403 `route_forbidden` when the gateway holds a route key and `secret` is
/// not `key`'s; counted and logged naming the route, the sandbox whose
/// listener took the call (an attached one's), and, when the secret is a
/// registered attempt's, that attempt.
fn forbidden(
    shared: &Shared,
    key: &str,
    secret: Option<&str>,
    sandbox: Option<&str>,
) -> Option<Response> {
    let route_key = shared.config.route_key.as_ref()?;
    if secret.is_some_and(|s| route_key.verify(key, s)) {
        return None;
    }
    shared.metrics.forbade();
    let sender = secret.and_then(|s| shared.attempt_of_secret(s));
    let message = match &sender {
        Some(sender) => format!(
            "route {key} refused: the call carries the secret of attempt {sender}, which may \
             speak only for itself"
        ),
        None if secret.is_some() => format!("route {key} refused: its secret is not this route's"),
        None => format!("route {key} refused: it carries no secret (`<key>@<secret>`)"),
    };
    tracing::warn!(
        route = %key,
        sender = sender.as_deref().unwrap_or("unknown"),
        sandbox = sandbox.unwrap_or("unknown"),
        "{message}"
    );
    Some(error_response(
        StatusCode::FORBIDDEN,
        "route_forbidden",
        &message,
        None,
    ))
}

#[tracing::instrument(name = "call", skip_all, fields(key = %key, path = %rest, call = tracing::field::Empty))]
async fn call(shared: Arc<Shared>, key: String, rest: String, req: Request) -> Response {
    let admitted_ms = now_ms();
    if shared.is_closed() {
        return closed(&shared, &key);
    }
    let (parts, body) = req.into_parts();
    let route = Route::from_path(&parts.method, &rest);
    let mut read = None;
    let checked = check(&shared, &key, route, &parts.method, &rest, body, &mut read).await;
    let checked = match checked {
        Ok(c) => c,
        Err(refusal) => return refuse(&shared, &key, route, read, refusal, admitted_ms).await,
    };
    let ticket = shared.gate.admit(&key).await;
    // Counted from here until its reply is recorded, so a drain waits for it; refused if the
    // drain began while it was read or waited at the gate: it has not gone upstream.
    let Some(recording) = shared.start_recording() else {
        return closed(&shared, &key);
    };
    let seq = match shared.next_seq(&key).await {
        Ok(seq) => seq,
        Err(e) => {
            let msg = format!("ledger refused call of key {key}: {e}");
            return error_response(
                StatusCode::INTERNAL_SERVER_ERROR,
                "ledger_error",
                &msg,
                None,
            );
        }
    };
    let call_id = format!("{key}#{seq}");
    tracing::Span::current().record("call", call_id.as_str());
    ticket.set_call(&call_id);
    let Checked {
        route,
        key: capture,
        bytes,
        view,
        upstream,
    } = checked;
    let attempt = capture.to_string();
    let rollout = capture.rollout().to_string();
    // Only a later attempt can repeat a recorded call: only then wait for the ledger's answer.
    let replay = shared.config.replay && capture.attempt() > 0;
    let stream = view.as_ref().is_some_and(|v| v.stream);
    let model_turns = view
        .as_ref()
        .map(|v| v.model_turns.clone())
        .unwrap_or_default();
    let call = NewCall {
        key: capture,
        seq,
        route,
        request: bytes.clone(),
        view,
        admitted_ms,
        replay,
    };
    if let Some(tito) = &shared.tito
        && route == Route::Chat
    {
        let c = crate::tito::call::TitoCall {
            ticket,
            recording,
            call_id,
            call,
            upstream,
            headers: parts.headers,
            attempt,
            rollout,
            model_turns,
        };
        return crate::tito::call::call(&shared, tito, c).await;
    }
    // With capture on the upstream gets the request with the token fields added; the ledger
    // keeps the harness's bytes.
    let (upstream_body, tokens) = match shared.config.tokens {
        Some(crate::tokens::TokenSource::Vllm) if route != Route::Models => match ask(
            route,
            &bytes,
            Wanted {
                logprobs: shared.config.token_logprobs,
                logprob_ids: !upstream.lists_token_ids.load(Ordering::Relaxed),
            },
        ) {
            Some((body, added)) => (body, Plan::Asked(added)),
            None => (bytes.clone(), Plan::Unsupported),
        },
        _ => (bytes.clone(), Plan::Off),
    };
    if replay {
        match shared.ledger.run(move |c| ledger::begin(c, &call)).await {
            Ok(Begun {
                replay: Some(r), ..
            }) => {
                return deliver::replay(&shared, ticket, call_id, r).await;
            }
            Ok(_) => {}
            Err(e) => return ledger_refused(&call_id, &e),
        }
    } else {
        shared.ledger.post(move |c| {
            if let Err(e) = ledger::begin(c, &call) {
                tracing::error!(
                    key = %call.key,
                    seq = call.seq,
                    error = %e,
                    "ledger: failed to record the call"
                );
            }
        });
    }
    let target = forward::Target {
        upstream,
        rest,
        query: parts.uri.query().map(str::to_owned),
        method: parts.method,
        headers: parts.headers,
    };
    let call = forward::Call {
        ticket,
        recording,
        call_id,
        route,
        stream,
        model_turns,
        tokens,
        attempt,
        rollout,
    };
    forward::forward(&shared, call, target, upstream_body).await
}

/// 503 `gateway_closed`: a draining gateway sends nothing more upstream. No row: the call
/// never became one.
fn closed(shared: &Shared, key: &str) -> Response {
    shared.metrics.ended("gateway_closed");
    let msg = format!("the gateway takes no new call: the run it serves is gone (key {key})");
    error_response(
        StatusCode::SERVICE_UNAVAILABLE,
        "gateway_closed",
        &msg,
        None,
    )
}

/// Route, key, upstream family, body size and JSON checks, in that order. The body read so
/// far is left in `read` for the refusal's ledger row.
async fn check(
    shared: &Shared,
    key: &str,
    route: Option<Route>,
    method: &axum::http::Method,
    rest: &str,
    body: Body,
    read: &mut Option<Bytes>,
) -> Result<Checked, Refusal> {
    let route = route.ok_or_else(|| {
        Refusal::new(
            StatusCode::NOT_FOUND,
            CallStatus::UnknownRoute,
            format!("no model route {method} /{rest} (key {key})"),
        )
    })?;
    let capture = CaptureKey::parse(key).map_err(|e| {
        Refusal::new(
            StatusCode::NOT_FOUND,
            CallStatus::UnknownCaptureKey,
            e.to_string(),
        )
    })?;
    shared.check_key(&capture)?;
    let not_served = |upstream: &Upstream| {
        Refusal::new(
            StatusCode::NOT_FOUND,
            CallStatus::RouteNotServed,
            format!(
                "route /{rest} is not served by the upstream {} (key {key})",
                upstream.base
            ),
        )
    };
    // With one upstream the family is known before the body is read.
    if !shared.upstreams.by_model() && !shared.upstreams.default().api.serves(route) {
        return Err(not_served(shared.upstreams.default()));
    }
    let bytes = read_limited(body, shared.config.max_body_bytes, key).await?;
    *read = Some(bytes.clone());
    let view = if route == Route::Models {
        None
    } else {
        let value: serde_json::Value = serde_json::from_slice(&bytes).map_err(|e| {
            Refusal::new(
                StatusCode::BAD_REQUEST,
                CallStatus::InvalidJson,
                format!("request body for /{rest} (key {key}) is not valid JSON: {e}"),
            )
        })?;
        if !value.is_object() {
            return Err(Refusal::new(
                StatusCode::BAD_REQUEST,
                CallStatus::InvalidJson,
                format!("request body for /{rest} (key {key}) is not a JSON object"),
            ));
        }
        Some(read_request(route, &value))
    };
    let upstream = Arc::clone(
        shared
            .upstreams
            .for_model(view.as_ref().and_then(|v| v.model.as_deref())),
    );
    if !upstream.api.serves(route) {
        return Err(not_served(&upstream));
    }
    Ok(Checked {
        route,
        key: capture,
        bytes,
        view,
        upstream,
    })
}

/// Answers a refused request with its error and records a ledger row that says so.
async fn refuse(
    shared: &Shared,
    key: &str,
    route: Option<Route>,
    read: Option<Bytes>,
    refusal: Refusal,
    admitted_ms: i64,
) -> Response {
    shared.metrics.ended(refusal.code.as_str());
    let call_id = match shared.next_seq(key).await {
        Ok(seq) => {
            let rejected = Rejected {
                capture_key: key.to_owned(),
                seq,
                key: CaptureKey::parse(key).ok(),
                route,
                request: read,
                status: refusal.code,
                http_status: refusal.status.as_u16(),
                error: refusal.message.clone(),
                admitted_ms,
            };
            shared.ledger.post(move |c| {
                if let Err(e) = ledger::reject(c, &rejected) {
                    tracing::error!(error = %e, "ledger: failed to record a refused request");
                }
            });
            Some(format!("{key}#{seq}"))
        }
        Err(_) => None,
    };
    error_response(
        refusal.status,
        refusal.code.as_str(),
        &refusal.message,
        call_id.as_deref(),
    )
}

/// Reads at most `limit` bytes of `body`.
async fn read_limited(body: Body, limit: usize, key: &str) -> Result<Bytes, Refusal> {
    let mut stream = body.into_data_stream();
    let mut buf = bytes::BytesMut::new();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| {
            Refusal::new(
                StatusCode::BAD_REQUEST,
                CallStatus::BodyUnreadable,
                format!("request body of key {key} could not be read: {e}"),
            )
        })?;
        if buf.len() + chunk.len() > limit {
            return Err(Refusal::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                CallStatus::BodyTooLarge,
                format!("request body of key {key} is larger than the limit of {limit} bytes"),
            ));
        }
        buf.extend_from_slice(&chunk);
    }
    Ok(buf.freeze())
}
