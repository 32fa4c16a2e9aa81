//! Recording a request refused before it became a call: a finished row with lineage `none`.

use rusqlite::{Connection, params};

use crate::conversation::Route;
use crate::errors::GatewayError;
use crate::ledger::bodies;
use crate::ledger::call_id::RowKey;
use crate::ledger::lookup::next_seq;
use crate::ledger::status::CallStatus;

/// A request refused before it became a call.
#[derive(Debug)]
pub struct Rejected {
    pub key: RowKey,
    /// Its sequence number when the caller has taken one; else the next free one.
    pub seq: Option<i64>,
    pub route: Option<Route>,
    pub request: Option<bytes::Bytes>,
    pub status: CallStatus,
    pub http_status: u16,
    pub error: String,
    pub admitted_ms: i64,
}

/// Records a request refused before admission; returns its call id.
pub(crate) fn reject(conn: &Connection, r: &Rejected) -> Result<String, GatewayError> {
    let seq = match r.seq {
        Some(seq) => seq,
        None => next_seq(conn, &r.key)?,
    };
    let capture_key = r.key.column();
    let call_id = format!("{capture_key}#{seq}");
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
            capture_key,
            r.key.rollout(),
            r.key.attempt(),
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
