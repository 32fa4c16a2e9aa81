//! The replay lookup: the earliest answer an earlier attempt of the rollout recorded for the
//! same conversation.

use rusqlite::{Connection, OptionalExtension as _, params};

use rollpoint_proto::key::AttemptKey;

use crate::errors::GatewayError;
use crate::ledger::bodies;

/// A recorded answer to replay.
#[derive(Debug, Clone)]
pub struct Replay {
    pub source_call_id: String,
    pub http_status: u16,
    pub content_type: Option<String>,
    pub body: Vec<u8>,
}

/// The row of a recorded answer (columns of `calls`).
#[derive(Debug)]
struct AnsweredRow {
    call_id: String,
    replayed_from: Option<String>,
    http_status: Option<u16>,
    content_type: Option<String>,
    response_digest: String,
    output_fp: Option<String>,
    usage: Option<String>,
}

/// A recorded answer found for a conversation, with the columns the replaying row copies.
#[derive(Debug)]
pub(crate) struct Found {
    pub replay: Replay,
    pub output_fp: Option<String>,
    /// The `usage` column as stored (JSON text).
    pub usage: Option<String>,
    pub response_digest: String,
}

/// The answer to replay for a call of `key` whose conversation digest is `conversation`.
pub(crate) fn find(
    conn: &Connection,
    key: &AttemptKey,
    conversation: &str,
) -> Result<Option<Found>, GatewayError> {
    let hit = conn
        .prepare_cached(
            "SELECT call_id, replayed_from, http_status, content_type, response_digest,
                    output_fp, usage
             FROM calls
             WHERE rollout = ?1 AND attempt < ?2 AND conversation_digest = ?3
               AND status IN ('ok', 'replayed') AND response_digest IS NOT NULL
             ORDER BY admitted_ms, attempt, seq LIMIT 1",
        )
        .and_then(|mut s| {
            s.query_row(
                params![key.rollout().as_str(), key.attempt(), conversation],
                |r| {
                    Ok(AnsweredRow {
                        call_id: r.get(0)?,
                        replayed_from: r.get(1)?,
                        http_status: r.get(2)?,
                        content_type: r.get(3)?,
                        response_digest: r.get(4)?,
                        output_fp: r.get(5)?,
                        usage: r.get(6)?,
                    })
                },
            )
            .optional()
        })
        .map_err(GatewayError::ledger("replay lookup"))?;
    let Some(row) = hit else {
        return Ok(None);
    };
    let Some(body) = bodies::get(conn, &row.response_digest)? else {
        return Ok(None);
    };
    Ok(Some(Found {
        replay: Replay {
            source_call_id: row.replayed_from.unwrap_or(row.call_id),
            http_status: row.http_status.unwrap_or(200),
            content_type: row.content_type,
            body,
        },
        output_fp: row.output_fp,
        usage: row.usage,
        response_digest: row.response_digest,
    }))
}
