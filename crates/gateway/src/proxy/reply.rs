//! The gateway's own replies: JSON errors that name what was wrong, and the header sets
//! passed between caller and upstream.

use axum::body::Body;
use axum::http::{HeaderName, HeaderValue, StatusCode, header};
use axum::response::Response;
use serde_json::json;

/// Header naming the ledger row of a call.
pub(crate) const CALL_ID: &str = "x-rollpoint-call-id";
/// Header naming the recorded call a reply was replayed from.
pub(crate) const REPLAYED_FROM: &str = "x-rollpoint-replayed-from";

/// A JSON error reply `{"error": {"type", "message", "call_id"}}`.
pub(crate) fn error_response(
    status: StatusCode,
    code: &str,
    message: &str,
    call_id: Option<&str>,
) -> Response {
    let body = json!({"error": {"type": code, "message": message, "call_id": call_id}});
    let mut resp = Response::new(Body::from(body.to_string()));
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
