//! The last stage, reply: the gateway's own replies, JSON errors that name what was wrong
//! and the call they were recorded as, and the header sets passed between caller and
//! upstream.

use axum::body::Body;
use axum::http::{HeaderName, HeaderValue, StatusCode, header};
use axum::response::Response;
use serde::Serialize;

use crate::errors::GatewayError;
use crate::ledger::CallId;

/// Header naming the ledger row of a call.
pub(crate) const CALL_ID: &str = "x-rollpoint-call-id";
/// Header naming the recorded call a reply was replayed from.
pub(crate) const REPLAYED_FROM: &str = "x-rollpoint-replayed-from";

/// Body of the gateway's own error replies on the model routes.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[schema(as = GatewayErrorReply)]
pub(crate) struct ErrorReply<'a> {
    #[schema(inline)]
    pub error: ErrorObject<'a>,
}

/// What went wrong (the fields are written in name order).
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct ErrorObject<'a> {
    /// The ledger row the call was recorded as (`<key>#<seq>`), when it has one.
    pub call_id: Option<&'a str>,
    pub message: &'a str,
    /// The call's status in the ledger (`invalid_json`, `body_unreadable`,
    /// `unknown_capture_key`, `attempt_fenced`, `body_too_large`,
    /// `unknown_route`, `route_not_served`, `upstream_unreachable`,
    /// `upstream_broken`), or `ledger_error`, `gateway_closed` or `route_forbidden`.
    #[serde(rename = "type")]
    pub kind: &'a str,
}

/// A JSON error reply `{"error": {"type", "message", "call_id"}}`.
pub(crate) fn error_response(
    status: StatusCode,
    code: &str,
    message: &str,
    call_id: Option<&str>,
) -> Response {
    let body = ErrorReply {
        error: ErrorObject {
            call_id,
            message,
            kind: code,
        },
    };
    let mut resp = Response::new(Body::from(serde_json::to_vec(&body).unwrap_or_default()));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if let Some(id) = call_id.and_then(|id| HeaderValue::from_str(id).ok()) {
        resp.headers_mut().insert(CALL_ID, id);
    }
    resp
}

/// Hop-by-hop and framing headers that are not passed on in either direction.
pub(crate) fn is_hop(name: &HeaderName) -> bool {
    matches!(
        name.as_str(),
        "connection"
            | "keep-alive"
            | "proxy-connection"
            | "proxy-authenticate"
            | "proxy-authorization"
            | "te"
            | "trailer"
            | "transfer-encoding"
            | "upgrade"
            | "host"
    )
}

/// Request headers not sent upstream: hop-by-hop ones, the length (recomputed from the same
/// bytes) and `accept-encoding` (the ledger stores and parses identity-encoded replies).
pub(crate) fn skip_upstream(name: &HeaderName) -> bool {
    is_hop(name) || name == header::CONTENT_LENGTH || name == header::ACCEPT_ENCODING
}

/// 500 `ledger_error`: the ledger did not take call `id`.
pub(crate) fn ledger_refused(id: &CallId, e: &GatewayError) -> Response {
    let msg = format!("ledger refused call {id}: {e}");
    error_response(
        StatusCode::INTERNAL_SERVER_ERROR,
        "ledger_error",
        &msg,
        Some(&id.to_string()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The body is `{"error": {"call_id", "message", "type"}}`, keys in name order.
    #[tokio::test]
    async fn error_body_bytes() {
        let resp = error_response(StatusCode::NOT_FOUND, "unknown_route", "no \"x\"", None);
        let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX)
            .await
            .expect("body");
        assert_eq!(
            &bytes[..],
            br#"{"error":{"call_id":null,"message":"no \"x\"","type":"unknown_route"}}"#
        );
        let resp = error_response(
            StatusCode::BAD_GATEWAY,
            "upstream_unreachable",
            "m",
            Some("k#3"),
        );
        assert_eq!(resp.headers()[CALL_ID], "k#3");
        let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX)
            .await
            .expect("body");
        assert_eq!(
            &bytes[..],
            br#"{"error":{"call_id":"k#3","message":"m","type":"upstream_unreachable"}}"#
        );
    }
}
