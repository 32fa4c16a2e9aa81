//! The sweep at open: calls a previous run of the gateway left in flight become interrupted.

use rusqlite::Connection;

use crate::errors::GatewayError;

/// Marks calls a previous run of the gateway left in flight as interrupted and settles the
/// lineage that waited on them.
pub(crate) fn sweep_interrupted(conn: &Connection) -> Result<usize, GatewayError> {
    let err = GatewayError::ledger("sweep interrupted calls");
    let n = conn
        .execute(
            "UPDATE calls SET status = 'interrupted',
                error = 'the gateway stopped before the call ended'
             WHERE status = 'in_flight'",
            [],
        )
        .map_err(&err)?;
    conn.execute(
        "UPDATE calls SET lineage = 'root' WHERE lineage = 'pending'",
        [],
    )
    .map_err(&err)?;
    Ok(n)
}
