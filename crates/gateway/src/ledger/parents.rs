//! Lineage in the ledger: the candidate parents of a call, whether an earlier call of the
//! rollout is still in flight, and settling the calls whose lineage waited on one.

use rusqlite::{Connection, params};

use crate::errors::GatewayError;
use crate::lineage::{Candidate, Lineage, RootReason, resolve};

/// The `lineage`, `parent_call_id` and `lineage_reason` columns of a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LineageColumns {
    /// `root`, `resolved` or `pending`.
    pub lineage: &'static str,
    pub parent_call_id: Option<String>,
    pub lineage_reason: Option<&'static str>,
}

impl LineageColumns {
    /// The columns of `lineage`; a root is `pending` while a possible parent is in flight.
    pub(crate) fn of(lineage: &Lineage, pending: bool) -> Self {
        let (lineage, parent_call_id, lineage_reason) = match lineage {
            Lineage::Resolved(p) => ("resolved", Some(p.clone()), None),
            Lineage::Root(r) if pending => ("pending", None, Some(r.name())),
            Lineage::Root(r) => ("root", None, Some(r.name())),
        };
        Self {
            lineage,
            parent_call_id,
            lineage_reason,
        }
    }
}

/// Whether `lineage` leaves a call waiting if an earlier call is in flight.
pub(crate) fn may_wait(lineage: &Lineage) -> bool {
    matches!(
        lineage,
        Lineage::Root(RootReason::NoMatch | RootReason::PrefixMismatch)
    )
}

/// Answered calls of `rollout` whose output fingerprint is `fp`, in admission order.
pub(crate) fn candidates(
    conn: &Connection,
    rollout: &str,
    fp: &str,
) -> Result<Vec<Candidate>, GatewayError> {
    let err = GatewayError::ledger("lineage candidates");
    let mut stmt = conn
        .prepare_cached(
            "SELECT call_id, response_digest, items FROM calls
             WHERE rollout = ?1 AND output_fp = ?2 AND status IN ('ok', 'replayed')
             ORDER BY admitted_ms, attempt, seq",
        )
        .map_err(&err)?;
    let rows = stmt
        .query_map(params![rollout, fp], |r| {
            let items: String = r.get(2)?;
            Ok(Candidate {
                call_id: r.get(0)?,
                response_digest: r.get(1)?,
                items: serde_json::from_str(&items).unwrap_or_default(),
            })
        })
        .map_err(&err)?;
    rows.collect::<Result<_, _>>().map_err(&err)
}

/// Whether a call of `rollout` other than `call_id`, admitted by `admitted_ms`, is in flight.
pub(crate) fn earlier_in_flight(
    conn: &Connection,
    rollout: &str,
    call_id: &str,
    admitted_ms: i64,
) -> Result<bool, GatewayError> {
    conn.prepare_cached(
        "SELECT EXISTS (SELECT 1 FROM calls WHERE rollout = ?1 AND status = 'in_flight'
            AND call_id != ?2 AND admitted_ms <= ?3)",
    )
    .and_then(|mut s| s.query_row(params![rollout, call_id, admitted_ms], |r| r.get(0)))
    .map_err(GatewayError::ledger("in-flight check"))
}

/// A call whose lineage waits on a call in flight (columns of `calls`).
#[derive(Debug)]
struct PendingRow {
    call_id: String,
    /// The `items` column: a JSON array of item digests.
    items: String,
    model_fp: Option<String>,
    admitted_ms: i64,
}

/// Resolves the parents of `rollout`'s calls whose lineage waited on a call in flight.
pub(crate) fn settle_pending(conn: &Connection, rollout: &str) -> Result<(), GatewayError> {
    let pending: Vec<PendingRow> = {
        let err = GatewayError::ledger("pending lineage");
        let mut stmt = conn
            .prepare_cached(
                "SELECT call_id, items, model_fp, admitted_ms FROM calls
                 WHERE rollout = ?1 AND lineage = 'pending' ORDER BY admitted_ms, seq",
            )
            .map_err(&err)?;
        let rows = stmt
            .query_map([rollout], |r| {
                Ok(PendingRow {
                    call_id: r.get(0)?,
                    items: r.get(1)?,
                    model_fp: r.get(2)?,
                    admitted_ms: r.get(3)?,
                })
            })
            .map_err(&err)?;
        rows.collect::<Result<_, _>>().map_err(&err)?
    };
    for row in pending {
        let items: Vec<String> = serde_json::from_str(&row.items).unwrap_or_default();
        let candidates = match &row.model_fp {
            Some(fp) => candidates(conn, rollout, fp)?,
            None => Vec::new(),
        };
        let lineage = resolve(row.model_fp.is_some(), &items, &candidates);
        if matches!(lineage, Lineage::Root(_))
            && earlier_in_flight(conn, rollout, &row.call_id, row.admitted_ms)?
        {
            continue;
        }
        let columns = LineageColumns::of(&lineage, false);
        conn.prepare_cached(
            "UPDATE calls SET lineage = ?2, parent_call_id = ?3, lineage_reason = ?4
             WHERE call_id = ?1",
        )
        .and_then(|mut s| {
            s.execute(params![
                row.call_id,
                columns.lineage,
                columns.parent_call_id,
                columns.lineage_reason
            ])
        })
        .map_err(GatewayError::ledger("settle lineage"))?;
    }
    Ok(())
}
