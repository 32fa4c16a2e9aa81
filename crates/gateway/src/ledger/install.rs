//! Install: exported records go into this ledger for the attempt that continues their
//! rollouts, after their bodies are checked against their digests.

use std::collections::HashSet;

use rusqlite::{Connection, params};
use serde_json::Value;

use crate::digest::sha256_hex;
use crate::errors::GatewayError;
use crate::ledger::bodies;
use crate::ledger::lookup::COLUMNS;
use crate::ledger::record::{CallRecord, LedgerRecord};
use crate::ledger::status::CallStatus;

/// What an install did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstallReport {
    pub rollouts: Vec<String>,
    pub calls: usize,
    pub bodies: usize,
    /// Rows of those rollouts dropped (calls that never ended, rows of the continuing attempt).
    pub dropped: usize,
}

/// Installs exported records for the rollouts they name. Every record must be of an attempt
/// before `attempt`, the one that continues. Of what this ledger already held for those
/// rollouts, answered calls of earlier attempts stay: a call a dead execution made after the
/// checkpoint was answered for exactly that conversation, so the continuing attempt replays it
/// rather than paying for it again. Everything else (calls that never ended, rows of `attempt`
/// or later) is dropped; a record whose call this ledger still holds is not inserted twice.
pub(crate) fn install(
    conn: &Connection,
    records: &[LedgerRecord],
    attempt: u32,
) -> Result<InstallReport, GatewayError> {
    let mut rollouts: Vec<String> = Vec::new();
    let mut have: HashSet<&str> = HashSet::new();
    for r in records {
        if let LedgerRecord::Body(b) = r {
            if sha256_hex(&b.bytes) != b.digest {
                return Err(GatewayError::Install {
                    rollout: String::new(),
                    message: format!("body {} does not match its digest", b.digest),
                });
            }
            have.insert(b.digest.as_str());
        }
    }
    for r in records {
        let LedgerRecord::Call(c) = r else { continue };
        let err = |message: String| GatewayError::Install {
            rollout: c.rollout.clone(),
            message,
        };
        if c.attempt >= attempt {
            return Err(err(format!(
                "call {} is of attempt {}, not before the continuing attempt {attempt}",
                c.call_id, c.attempt
            )));
        }
        for d in c.bodies() {
            if !have.contains(d.as_str()) {
                return Err(err(format!(
                    "call {} references missing body {d}",
                    c.call_id
                )));
            }
        }
        if !rollouts.contains(&c.rollout) {
            rollouts.push(c.rollout.clone());
        }
    }
    let mut dropped = 0;
    for r in &rollouts {
        dropped += conn
            .execute(
                "DELETE FROM calls WHERE rollout = ?1 AND (attempt >= ?2 OR status != 'ok')",
                params![r, attempt],
            )
            .map_err(GatewayError::ledger("clear rollout before install"))?;
    }
    let mut body_count = 0;
    let mut call_count = 0;
    for r in records {
        match r {
            LedgerRecord::Body(b) => {
                bodies::put(conn, &b.digest, &b.bytes)?;
                body_count += 1;
            }
            LedgerRecord::Call(c) => {
                let held: bool = conn
                    .query_row(
                        "SELECT EXISTS(SELECT 1 FROM calls WHERE call_id = ?1)",
                        [&c.call_id],
                        |row| row.get(0),
                    )
                    .map_err(GatewayError::ledger("look up an installed call"))?;
                if !held {
                    insert_record(conn, c)?;
                    call_count += 1;
                }
            }
        }
    }
    Ok(InstallReport {
        rollouts,
        calls: call_count,
        bodies: body_count,
        dropped,
    })
}

fn insert_record(conn: &Connection, record: &CallRecord) -> Result<(), GatewayError> {
    // A call in flight when exported never ends here: record it as interrupted, and settle
    // lineage that waited for it.
    let mut fixed;
    let mut c = record;
    if c.status == CallStatus::InFlight || c.lineage == "pending" {
        fixed = c.clone();
        if fixed.status == CallStatus::InFlight {
            fixed.status = CallStatus::Interrupted;
            fixed.error = Some("the call was in flight when its records were exported".into());
        }
        if fixed.lineage == "pending" {
            fixed.lineage = "root".into();
        }
        c = &fixed;
    }
    let sql = format!(
        "INSERT INTO calls ({COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11,
         ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22, ?23, ?24, ?25, ?26, ?27, ?28,
         ?29, ?30, ?31)"
    );
    conn.prepare_cached(&sql)
        .and_then(|mut s| {
            s.execute(params![
                c.call_id,
                c.capture_key,
                c.rollout,
                c.attempt,
                c.seq,
                c.route,
                c.stream,
                c.model,
                c.request_digest,
                c.conversation_digest,
                serde_json::to_string(&c.items).unwrap_or_else(|_| "[]".into()),
                c.model_fp,
                c.output_fp,
                c.parent_call_id,
                c.lineage,
                c.lineage_reason,
                c.status,
                c.http_status,
                c.content_type,
                c.error,
                c.replayed_from,
                c.response_digest,
                c.usage.as_ref().map(Value::to_string),
                c.admitted_ms,
                c.upstream_ms,
                c.first_byte_ms,
                c.finished_ms,
                c.delivered_ms,
                c.tokens_digest,
                c.tokens_fault
                    .as_ref()
                    .and_then(|f| serde_json::to_string(f).ok()),
                c.policy_version,
            ])
        })
        .map_err(GatewayError::ledger("install call"))?;
    Ok(())
}
