//! The ledger's SQLite schema and its migrations, applied by a `PRAGMA user_version` loop
//! (migration crates pin an older rusqlite than the one bundled here).

use std::path::Path;

use rusqlite::Connection;

use crate::errors::GatewayError;

/// Migrations in order; the schema version is the number applied (2: token capture, 3: policy versions). Every index costs page
/// writes on each call, so there are only the two lookups the proxy needs (replay by
/// conversation, lineage by output); other queries scan one rollout's rows.
const MIGRATIONS: &[&str] = &[
    r"
CREATE TABLE calls (
    call_id TEXT PRIMARY KEY,
    capture_key TEXT NOT NULL,
    rollout TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    seq INTEGER NOT NULL,
    route TEXT NOT NULL,
    stream INTEGER NOT NULL,
    model TEXT,
    request_digest TEXT,
    conversation_digest TEXT,
    items TEXT NOT NULL,
    model_fp TEXT,
    output_fp TEXT,
    parent_call_id TEXT,
    lineage TEXT NOT NULL,
    lineage_reason TEXT,
    status TEXT NOT NULL,
    http_status INTEGER,
    content_type TEXT,
    error TEXT,
    replayed_from TEXT,
    response_digest TEXT,
    usage TEXT,
    admitted_ms INTEGER NOT NULL,
    upstream_ms INTEGER,
    first_byte_ms INTEGER,
    finished_ms INTEGER,
    delivered_ms INTEGER
);
CREATE INDEX calls_rollout_conversation ON calls (rollout, conversation_digest);
CREATE INDEX calls_rollout_output ON calls (rollout, output_fp);
CREATE TABLE bodies (
    digest TEXT PRIMARY KEY,
    bytes BLOB NOT NULL
);
",
    r"
ALTER TABLE calls ADD COLUMN tokens_digest TEXT;
ALTER TABLE calls ADD COLUMN tokens_fault TEXT;
",
    r"
ALTER TABLE calls ADD COLUMN policy_version TEXT;
",
];

/// The schema version this build writes.
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// Sets the connection up (WAL, normal sync) and brings the schema to `SCHEMA_VERSION`.
pub fn prepare(conn: &mut Connection, path: &Path) -> Result<(), GatewayError> {
    let open = |source| GatewayError::LedgerOpen {
        path: path.to_owned(),
        source,
    };
    conn.pragma_update(None, "journal_mode", "WAL")
        .map_err(open)?;
    conn.pragma_update(None, "synchronous", "NORMAL")
        .map_err(open)?;
    conn.busy_timeout(std::time::Duration::from_secs(10))
        .map_err(open)?;
    let found = version(conn, path)?;
    for (i, sql) in MIGRATIONS
        .iter()
        .enumerate()
        .skip(usize::try_from(found).unwrap_or(0))
    {
        let tx = conn.transaction().map_err(open)?;
        tx.execute_batch(sql).map_err(open)?;
        tx.pragma_update(
            None,
            "user_version",
            i64::try_from(i + 1).unwrap_or(i64::MAX),
        )
        .map_err(open)?;
        tx.commit().map_err(open)?;
    }
    Ok(())
}

/// The schema version of the ledger `conn` has open at `path`; newer than this build's is an
/// error.
pub(crate) fn version(conn: &Connection, path: &Path) -> Result<i64, GatewayError> {
    let found: i64 = conn
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .map_err(|source| GatewayError::LedgerOpen {
            path: path.to_owned(),
            source,
        })?;
    if found > SCHEMA_VERSION {
        return Err(GatewayError::LedgerTooNew {
            path: path.to_owned(),
            found,
            supported: SCHEMA_VERSION,
        });
    }
    Ok(found)
}

/// A prepared ledger in memory, for tests.
#[cfg(test)]
#[expect(clippy::unwrap_used)]
pub(crate) fn in_memory() -> Connection {
    let mut conn = Connection::open_in_memory().unwrap();
    prepare(&mut conn, Path::new(":memory:")).unwrap();
    conn
}
