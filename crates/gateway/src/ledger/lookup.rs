//! Reading the ledger: the next free sequence number of a key, call rows, stored bodies.

use rusqlite::{Connection, Row, params};

use crate::errors::GatewayError;
use crate::ledger::bodies;
use crate::ledger::call_id::RowKey;
use crate::ledger::record::CallRecord;
use crate::ledger::status::CallStatus;

/// Every column of `calls`, in the order of `CallRecord`'s fields.
pub(crate) const COLUMNS: &str =
    "call_id, capture_key, rollout, attempt, seq, route, stream, model,
    request_digest, conversation_digest, items, model_fp, output_fp, parent_call_id, lineage,
    lineage_reason, status, http_status, content_type, error, replayed_from, response_digest,
    usage, admitted_ms, upstream_ms, first_byte_ms, finished_ms, delivered_ms, tokens_digest,
    tokens_fault, policy_version";

/// The next free sequence number of `key` in the stored rows.
pub(crate) fn next_seq(conn: &Connection, key: &RowKey) -> Result<i64, GatewayError> {
    let (rollout, capture_key) = (key.rollout(), key.column());
    let max: Option<i64> = conn
        .query_row(
            "SELECT MAX(seq) FROM calls WHERE rollout = ?1 AND capture_key = ?2",
            params![rollout, capture_key],
            |r| r.get(0),
        )
        .map_err(GatewayError::ledger("next call sequence"))?;
    Ok(max.map_or(0, |m| m + 1))
}

/// One row of `SELECT {COLUMNS}`; an unknown status is an error naming the call.
fn read_row(r: &Row<'_>) -> rusqlite::Result<Result<CallRecord, GatewayError>> {
    let call_id: String = r.get(0)?;
    let status: String = r.get(16)?;
    let Some(status) = CallStatus::from_name(&status) else {
        return Ok(Err(GatewayError::UnknownStatus {
            call_id,
            value: status,
        }));
    };
    let items: String = r.get(10)?;
    let usage: Option<String> = r.get(22)?;
    let tokens_fault: Option<String> = r.get(29)?;
    Ok(Ok(CallRecord {
        call_id,
        capture_key: r.get(1)?,
        rollout: r.get(2)?,
        attempt: r.get(3)?,
        seq: r.get(4)?,
        route: r.get(5)?,
        stream: r.get(6)?,
        model: r.get(7)?,
        request_digest: r.get(8)?,
        conversation_digest: r.get(9)?,
        items: serde_json::from_str(&items).unwrap_or_default(),
        model_fp: r.get(11)?,
        output_fp: r.get(12)?,
        parent_call_id: r.get(13)?,
        lineage: r.get(14)?,
        lineage_reason: r.get(15)?,
        status,
        http_status: r.get(17)?,
        content_type: r.get(18)?,
        error: r.get(19)?,
        replayed_from: r.get(20)?,
        response_digest: r.get(21)?,
        usage: usage.and_then(|u| serde_json::from_str(&u).ok()),
        admitted_ms: r.get(23)?,
        upstream_ms: r.get(24)?,
        first_byte_ms: r.get(25)?,
        finished_ms: r.get(26)?,
        delivered_ms: r.get(27)?,
        tokens_digest: r.get(28)?,
        tokens_fault: tokens_fault.and_then(|f| serde_json::from_str(&f).ok()),
        policy_version: r.get(30)?,
    }))
}

/// Rows of `rollout` (or every row), in admission order.
pub(crate) fn rows(
    conn: &Connection,
    rollout: Option<&str>,
) -> Result<Vec<CallRecord>, GatewayError> {
    let err = GatewayError::ledger("read calls");
    let sql = format!(
        "SELECT {COLUMNS} FROM calls WHERE ?1 IS NULL OR rollout = ?1
         ORDER BY admitted_ms, attempt, seq"
    );
    let mut stmt = conn.prepare_cached(&sql).map_err(&err)?;
    let rows = stmt.query_map([rollout], read_row).map_err(&err)?;
    rows.map(|row| row.map_err(&err)?).collect()
}

/// The body stored under `digest`.
pub(crate) fn body(conn: &Connection, digest: &str) -> Result<Option<Vec<u8>>, GatewayError> {
    bodies::get(conn, digest)
}

#[cfg(test)]
#[expect(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::ledger::schema::in_memory;

    fn insert(conn: &Connection, call_id: &str, status: &str) {
        conn.execute(
            "INSERT INTO calls (call_id, capture_key, rollout, attempt, seq, route, stream,
                items, lineage, status, admitted_ms)
             VALUES (?1, 'r', 'r', 0, 0, 'chat', 0, '[]', 'root', ?2, 1)",
            params![call_id, status],
        )
        .unwrap();
    }

    #[test]
    fn a_status_reads_back_as_the_name_it_was_stored_under() {
        let conn = in_memory();
        insert(&conn, "r#0", CallStatus::UpstreamBroken.as_str());
        let rows = rows(&conn, None).unwrap();
        assert_eq!(rows[0].status, CallStatus::UpstreamBroken);
    }

    #[test]
    fn an_unknown_status_is_refused_naming_the_call_and_the_value() {
        let conn = in_memory();
        insert(&conn, "r#0", "finished");
        let err = rows(&conn, Some("r")).unwrap_err();
        assert!(
            matches!(&err, GatewayError::UnknownStatus { call_id, value }
                if call_id == "r#0" && value == "finished"),
            "{err:?}"
        );
        assert_eq!(
            err.to_string(),
            "ledger row r#0 has unknown status `finished`"
        );
    }
}
