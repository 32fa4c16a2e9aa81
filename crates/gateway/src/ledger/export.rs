//! Export: every row of a rollout and every body they reference, bodies first; and, read
//! straight from the file, what a trajectory needs.

use std::collections::BTreeSet;
use std::path::Path;

use rusqlite::{Connection, OpenFlags};

use crate::errors::GatewayError;
use crate::ledger::record::{BodyRecord, CallRecord, LedgerRecord};
use crate::ledger::{bodies, lookup};

/// Every row of `rollout` and every body they reference.
pub(crate) fn export(conn: &Connection, rollout: &str) -> Result<Vec<LedgerRecord>, GatewayError> {
    let calls = lookup::rows(conn, Some(rollout))?;
    with_bodies(conn, calls, |c| Box::new(c.bodies()))
}

/// `calls`, after the bodies `pick` names of them (each once), as records.
fn with_bodies(
    conn: &Connection,
    calls: Vec<CallRecord>,
    pick: impl for<'c> Fn(&'c CallRecord) -> Box<dyn Iterator<Item = &'c String> + 'c>,
) -> Result<Vec<LedgerRecord>, GatewayError> {
    let digests: BTreeSet<&String> = calls.iter().flat_map(pick).collect();
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

/// The calls of `rollout` (or of every rollout) and the bodies a trajectory reads (answers
/// and tokens; requests are left out), from the ledger at `path` opened read-only: a gateway
/// may go on writing it meanwhile.
pub fn read_for_trajectories(
    path: &Path,
    rollout: Option<&str>,
) -> Result<Vec<LedgerRecord>, GatewayError> {
    read_only(path, rollout, |c| {
        Box::new(c.response_digest.iter().chain(c.tokens_digest.iter()))
    })
}

/// The calls of `rollout` (or of every rollout) with every body they reference, requests included (what a view of
/// its turns shows), from the ledger at `path` opened read-only.
pub fn read_with_requests(
    path: &Path,
    rollout: Option<&str>,
) -> Result<Vec<LedgerRecord>, GatewayError> {
    read_only(path, rollout, |c| Box::new(c.bodies()))
}

/// The calls of `rollout` (or of every rollout) and the bodies `pick` names, read-only.
fn read_only(
    path: &Path,
    rollout: Option<&str>,
    pick: impl for<'c> Fn(&'c CallRecord) -> Box<dyn Iterator<Item = &'c String> + 'c>,
) -> Result<Vec<LedgerRecord>, GatewayError> {
    let open = |source| GatewayError::LedgerOpen {
        path: path.to_owned(),
        source,
    };
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(open)?;
    conn.busy_timeout(std::time::Duration::from_secs(10))
        .map_err(open)?;
    // Read-only: an older ledger cannot be upgraded here.
    let found = crate::ledger::schema::version(&conn, path)?;
    let supported = crate::ledger::SCHEMA_VERSION;
    if found < supported {
        return Err(GatewayError::LedgerTooOld {
            path: path.to_owned(),
            found,
            supported,
        });
    }
    let calls = lookup::rows(&conn, rollout)?;
    with_bodies(&conn, calls, pick)
}
