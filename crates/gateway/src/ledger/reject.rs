//! Recording a request refused before it became a call: a finished row with lineage `none`.

use rusqlite::{Connection, params};

use crate::capture::CaptureKey;
use crate::conversation::Route;
use crate::errors::GatewayError;
use crate::ledger::bodies;
use crate::ledger::status::CallStatus;

/// A request refused before it became a call.
#[derive(Debug)]
pub struct Rejected {
    pub capture_key: String,
    pub seq: i64,
    pub key: Option<CaptureKey>,
    pub route: Option<Route>,
    pub request: Option<bytes::Bytes>,
    pub status: CallStatus,
    pub http_status: u16,
    pub error: String,
    pub admitted_ms: i64,
}

/// Records a request refused before admission.
pub(crate) fn reject(conn: &Connection, r: &Rejected) -> Result<String, GatewayError> {
    let seq = r.seq;
    let call_id = format!("{}#{seq}", r.capture_key);
    let request_digest = r
        .request
        .as_deref()
        .map(|b| bodies::store(conn, b))
        .transpose()?;
    conn.prepare_cached(
        "INSERT INTO calls (call_id, capture_key, rollout, attempt, seq, route, stream,
            request_digest, items, lineage, status, http_status, error, admitted_ms, finished_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, 0, ?7, '[]', 'none', ?8, ?9, ?10, ?11, ?11)",
    )
    .and_then(|mut s| {
        s.execute(params![
            call_id,
            r.capture_key,
            r.key
                .as_ref()
                .map_or(r.capture_key.as_str(), |k| k.rollout().as_str()),
            r.key.as_ref().map_or(0, CaptureKey::attempt),
            seq,
            r.route.map_or("unknown", Route::name),
            request_digest,
            r.status,
            r.http_status,
            r.error,
            r.admitted_ms,
        ])
    })
    .map_err(GatewayError::ledger("insert rejected call"))?;
    Ok(call_id)
}
