//! Stage 1, route: the route key's secret, then the route, the attempt key, the upstream's
//! API family, the body's size and its JSON, in that order. What passes is a [`Checked`]
//! request; what fails is a [`Refused`] one, with what was read of it for its ledger row.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::http::{Method, StatusCode};
use axum::response::Response;
use futures_util::StreamExt as _;
use rollpoint_proto::key::AttemptKey;

use super::reply::error_response;
use super::types::Refusal;
use crate::conversation::{RequestView, Route, read_request};
use crate::ledger::{CallStatus, RowKey};
use crate::shared::{KeyRefused, Shared};
use crate::upstream::Upstream;

/// A request that passed every check.
pub(crate) struct Checked {
    pub route: Route,
    pub key: AttemptKey,
    pub bytes: Bytes,
    pub view: Option<RequestView>,
    /// Where it goes: the upstream of its model, else the default.
    pub upstream: Arc<Upstream>,
}

/// A request refused by a check, with what its ledger row keeps.
pub(crate) struct Refused {
    pub refusal: Refusal,
    /// The attempt its route names, or the route's text when it names none.
    pub key: RowKey,
    pub route: Option<Route>,
    /// The body as far as it was read.
    pub read: Option<Bytes>,
}

/// 403 `route_forbidden` when the gateway holds a route key and `secret` is
/// not `key`'s; counted and logged naming the route, the sandbox whose
/// listener took the call (an attached one's), and, when the secret is a
/// registered attempt's, that attempt.
pub(crate) fn forbidden(
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
    let sender = sender.map(|s| s.to_string());
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

/// Every check of a request under route segment `key` and path `rest`.
pub(crate) async fn check(
    shared: &Shared,
    key: &str,
    method: &Method,
    rest: &str,
    body: Body,
) -> Result<Checked, Refused> {
    let route = Route::from_path(method, rest);
    let refused = |refusal, key, read| Refused {
        refusal,
        key,
        route,
        read,
    };
    let unparsed = || RowKey::Unparsed(key.to_owned());
    let Some(route) = route else {
        let refusal = Refusal::new(
            StatusCode::NOT_FOUND,
            CallStatus::UnknownRoute,
            format!("no model route {method} /{rest} (key {key})"),
        );
        let row = AttemptKey::parse(key).map_or_else(|_| unparsed(), RowKey::Attempt);
        return Err(refused(refusal, row, None));
    };
    let attempt = match AttemptKey::parse(key) {
        Ok(k) => k,
        Err(e) => {
            let refusal = Refusal::new(
                StatusCode::NOT_FOUND,
                CallStatus::UnknownCaptureKey,
                e.to_string(),
            );
            return Err(refused(refusal, unparsed(), None));
        }
    };
    let row = || RowKey::Attempt(attempt.clone());
    if let Err(e) = shared.check_key(&attempt) {
        return Err(refused(key_refusal(e), row(), None));
    }
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
        return Err(refused(not_served(shared.upstreams.default()), row(), None));
    }
    let bytes = read_limited(body, shared.config.max_body_bytes, key)
        .await
        .map_err(|r| refused(r, row(), None))?;
    let view = match view_of(route, &bytes, rest, key) {
        Ok(v) => v,
        Err(r) => return Err(refused(r, row(), Some(bytes))),
    };
    let upstream = Arc::clone(
        shared
            .upstreams
            .for_model(view.as_ref().and_then(|v| v.model.as_deref())),
    );
    if !upstream.api.serves(route) {
        return Err(refused(not_served(&upstream), row(), Some(bytes)));
    }
    Ok(Checked {
        route,
        key: attempt,
        bytes,
        view,
        upstream,
    })
}

/// The request read as a model call; `None` for the models list, which has no body to read.
fn view_of(
    route: Route,
    bytes: &[u8],
    rest: &str,
    key: &str,
) -> Result<Option<RequestView>, Refusal> {
    if route == Route::Models {
        return Ok(None);
    }
    let value: serde_json::Value = serde_json::from_slice(bytes).map_err(|e| {
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
    Ok(Some(read_request(route, &value)))
}

/// A refused attempt key as the reply says it.
fn key_refusal(e: KeyRefused) -> Refusal {
    match e {
        KeyRefused::Unknown(message) => Refusal::new(
            StatusCode::NOT_FOUND,
            CallStatus::UnknownCaptureKey,
            message,
        ),
        KeyRefused::Fenced(message) => {
            Refusal::new(StatusCode::CONFLICT, CallStatus::AttemptFenced, message)
        }
    }
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
