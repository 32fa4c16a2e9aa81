//! Recording that the whole reply of a call reached the caller.

use rusqlite::{Connection, params};

use crate::errors::GatewayError;
use crate::ledger::call_id::CallId;

/// Records that the whole reply reached the caller at `ms`.
pub(crate) fn delivered(conn: &Connection, id: &CallId, ms: i64) -> Result<(), GatewayError> {
    let call_id = id.to_string();
    conn.prepare_cached("UPDATE calls SET delivered_ms = ?2 WHERE call_id = ?1")
        .and_then(|mut s| s.execute(params![call_id, ms]))
        .map_err(GatewayError::ledger("mark delivered"))?;
    Ok(())
}
