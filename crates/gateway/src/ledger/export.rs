//! Export: every row of a rollout and every body they reference, bodies first.

use std::collections::BTreeSet;

use rusqlite::Connection;

use crate::errors::GatewayError;
use crate::ledger::record::{BodyRecord, CallRecord, LedgerRecord};
use crate::ledger::{bodies, lookup};

/// Every row of `rollout` and every body they reference.
pub(crate) fn export(conn: &Connection, rollout: &str) -> Result<Vec<LedgerRecord>, GatewayError> {
    let calls = lookup::rows(conn, Some(rollout))?;
    let digests: BTreeSet<&String> = calls.iter().flat_map(CallRecord::bodies).collect();
    let mut out = Vec::with_capacity(calls.len() + digests.len());
    for d in digests {
        if let Some(bytes) = bodies::get(conn, d)? {
            out.push(LedgerRecord::Body(BodyRecord {
                digest: d.clone(),
                bytes,
            }));
        }
    }
    out.extend(calls.into_iter().map(|c| LedgerRecord::Call(Box::new(c))));
    Ok(out)
}
