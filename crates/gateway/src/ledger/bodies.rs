//! The body store: request and response bytes in `bodies`, each stored once under its SHA-256.

use rusqlite::{Connection, OptionalExtension as _, params};

use crate::digest::sha256_hex;
use crate::errors::GatewayError;

/// Stores `bytes` under `digest` unless a body is stored there already.
pub(crate) fn put(conn: &Connection, digest: &str, bytes: &[u8]) -> Result<(), GatewayError> {
    conn.prepare_cached("INSERT OR IGNORE INTO bodies (digest, bytes) VALUES (?1, ?2)")
        .and_then(|mut s| s.execute(params![digest, bytes]))
        .map_err(GatewayError::ledger("store body"))?;
    Ok(())
}

/// Stores `bytes` under their digest and returns it.
pub(crate) fn store(conn: &Connection, bytes: &[u8]) -> Result<String, GatewayError> {
    let digest = sha256_hex(bytes);
    put(conn, &digest, bytes)?;
    Ok(digest)
}

/// The body stored under `digest`.
pub(crate) fn get(conn: &Connection, digest: &str) -> Result<Option<Vec<u8>>, GatewayError> {
    conn.prepare_cached("SELECT bytes FROM bodies WHERE digest = ?1")
        .and_then(|mut s| s.query_row([digest], |r| r.get(0)).optional())
        .map_err(GatewayError::ledger("read body"))
}
