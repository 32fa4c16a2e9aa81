//! The ledger's operations, each run on the writer thread with the connection: admit a call
//! (with lineage and the replay lookup), record a rejection, finish, mark delivery, read rows,
//! export and install.

use std::collections::{BTreeSet, HashSet};

use rusqlite::{Connection, OptionalExtension, Row, params};
use serde_json::Value;

use crate::capture::CaptureKey;
use crate::conversation::{RequestView, Route};
use crate::digest::sha256_hex;
use crate::errors::GatewayError;
use crate::ledger::record::{BodyRecord, CallRecord, LedgerRecord};
use crate::lineage::{Candidate, Lineage, RootReason, resolve};

fn q(context: &'static str) -> impl Fn(rusqlite::Error) -> GatewayError {
    move |source| GatewayError::Ledger { context, source }
}

/// A call the proxy admitted.
#[derive(Debug)]
pub struct NewCall {
    pub key: CaptureKey,
    /// Sequence number within the capture key (see `next_seq`).
    pub seq: i64,
    pub route: Route,
    pub request: bytes::Bytes,
    pub view: Option<RequestView>,
    pub admitted_ms: i64,
    pub replay: bool,
}

/// A recorded answer to replay.
#[derive(Debug, Clone)]
pub struct Replay {
    pub source_call_id: String,
    pub http_status: u16,
    pub content_type: Option<String>,
    pub body: Vec<u8>,
}

/// The admitted call's id, lineage and, if the conversation was answered before, the replay.
#[derive(Debug)]
pub struct Begun {
    pub call_id: String,
    pub lineage: Lineage,
    pub replay: Option<Replay>,
}

/// A request refused before it became a call.
#[derive(Debug)]
pub struct Rejected {
    pub capture_key: String,
    pub seq: i64,
    pub key: Option<CaptureKey>,
    pub route: Option<Route>,
    pub request: Option<bytes::Bytes>,
    pub status: &'static str,
    pub http_status: u16,
    pub error: String,
    pub admitted_ms: i64,
}

/// How a call ended.
#[derive(Debug, Default)]
pub struct Finish {
    pub status: &'static str,
    pub http_status: Option<u16>,
    pub content_type: Option<String>,
    pub error: Option<String>,
    pub response: Option<Vec<u8>>,
    pub usage: Option<Value>,
    pub output_fp: Option<String>,
    pub upstream_ms: Option<i64>,
    pub first_byte_ms: Option<i64>,
    pub finished_ms: i64,
}

/// What an install did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstallReport {
    pub rollouts: Vec<String>,
    pub calls: usize,
    pub bodies: usize,
    /// Rows of those rollouts dropped (calls that never ended, rows of the continuing attempt).
    pub dropped: usize,
}

/// The next free sequence number of `capture_key` in the stored rows.
pub fn next_seq(conn: &Connection, capture_key: &str) -> Result<i64, GatewayError> {
    // Rows of a malformed key are filed under the raw key as their rollout.
    let rollout =
        CaptureKey::parse(capture_key).map_or_else(|_| capture_key.to_owned(), |k| k.rollout);
    let max: Option<i64> = conn
        .query_row(
            "SELECT MAX(seq) FROM calls WHERE rollout = ?1 AND capture_key = ?2",
            params![rollout, capture_key],
            |r| r.get(0),
        )
        .map_err(q("next call sequence"))?;
    Ok(max.map_or(0, |m| m + 1))
}

fn put_body(conn: &Connection, digest: &str, bytes: &[u8]) -> Result<(), GatewayError> {
    conn.prepare_cached("INSERT OR IGNORE INTO bodies (digest, bytes) VALUES (?1, ?2)")
        .and_then(|mut s| s.execute(params![digest, bytes]))
        .map_err(q("store body"))?;
    Ok(())
}

/// Stores `bytes` under their digest and returns it.
fn store_body(conn: &Connection, bytes: &[u8]) -> Result<String, GatewayError> {
    let digest = sha256_hex(bytes);
    put_body(conn, &digest, bytes)?;
    Ok(digest)
}

fn get_body(conn: &Connection, digest: &str) -> Result<Option<Vec<u8>>, GatewayError> {
    conn.prepare_cached("SELECT bytes FROM bodies WHERE digest = ?1")
        .and_then(|mut s| s.query_row([digest], |r| r.get(0)).optional())
        .map_err(q("read body"))
}

/// Admits a call: assigns its id, resolves its parent, looks for a replay, inserts the row.
pub fn begin(conn: &Connection, call: &NewCall) -> Result<Begun, GatewayError> {
    let capture_key = call.key.to_string();
    let seq = call.seq;
    let call_id = format!("{capture_key}#{seq}");
    let request_digest = store_body(conn, &call.request)?;
    let view = call.view.as_ref();
    let model_fp = view.and_then(RequestView::model_fp);
    let lineage = match view {
        None => Lineage::Root(RootReason::NotGeneration),
        Some(v) => {
            let candidates = match &model_fp {
                Some(fp) => candidates(conn, &call.key.rollout, fp)?,
                None => Vec::new(),
            };
            resolve(model_fp.is_some(), &v.items, &candidates)
        }
    };
    let replay = match view {
        Some(v) if call.replay => find_replay(conn, &call.key, &v.conversation_digest)?,
        _ => None,
    };
    // A parent may still be in flight (its reply not yet recorded): decide when it ends.
    let pending = matches!(
        lineage,
        Lineage::Root(RootReason::NoMatch | RootReason::PrefixMismatch)
    ) && earlier_in_flight(conn, &call.key.rollout, &call_id, call.admitted_ms)?;
    let (parent, lineage_name, reason) = match &lineage {
        Lineage::Resolved(p) => (Some(p.as_str()), "resolved", None),
        Lineage::Root(r) if pending => (None, "pending", Some(r.name())),
        Lineage::Root(r) => (None, "root", Some(r.name())),
    };
    let items = serde_json::to_string(&view.map(|v| v.items.clone()).unwrap_or_default())
        .unwrap_or_else(|_| "[]".into());
    let (status, replay_cols) = match &replay {
        Some((r, output_fp, usage, response_digest)) => (
            "replayed",
            (
                Some(r.source_call_id.clone()),
                Some(r.http_status),
                r.content_type.clone(),
                output_fp.clone(),
                usage.clone(),
                Some(response_digest.clone()),
                Some(call.admitted_ms),
            ),
        ),
        None => ("in_flight", (None, None, None, None, None, None, None)),
    };
    conn.prepare_cached(
        "INSERT INTO calls (call_id, capture_key, rollout, attempt, seq, route, stream, model,
            request_digest, conversation_digest, items, model_fp, parent_call_id, lineage,
            lineage_reason, status, admitted_ms, replayed_from, http_status, content_type,
            output_fp, usage, response_digest, finished_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17,
            ?18, ?19, ?20, ?21, ?22, ?23, ?24)",
    )
    .and_then(|mut s| {
        s.execute(params![
            call_id,
            capture_key,
            call.key.rollout,
            call.key.attempt,
            seq,
            call.route.name(),
            view.is_some_and(|v| v.stream),
            view.and_then(|v| v.model.clone()),
            request_digest,
            view.map(|v| v.conversation_digest.clone()),
            items,
            model_fp,
            parent,
            lineage_name,
            reason,
            status,
            call.admitted_ms,
            replay_cols.0,
            replay_cols.1,
            replay_cols.2,
            replay_cols.3,
            replay_cols.4,
            replay_cols.5,
            replay_cols.6,
        ])
    })
    .map_err(q("insert call"))?;
    Ok(Begun {
        call_id,
        lineage,
        replay: replay.map(|(r, ..)| r),
    })
}

fn candidates(conn: &Connection, rollout: &str, fp: &str) -> Result<Vec<Candidate>, GatewayError> {
    let mut stmt = conn
        .prepare_cached(
            "SELECT call_id, response_digest, items FROM calls
             WHERE rollout = ?1 AND output_fp = ?2 AND status IN ('ok', 'replayed')
             ORDER BY admitted_ms, attempt, seq",
        )
        .map_err(q("lineage candidates"))?;
    let rows = stmt
        .query_map(params![rollout, fp], |r| {
            let items: String = r.get(2)?;
            Ok(Candidate {
                call_id: r.get(0)?,
                response_digest: r.get(1)?,
                items: serde_json::from_str(&items).unwrap_or_default(),
            })
        })
        .map_err(q("lineage candidates"))?;
    rows.collect::<Result<_, _>>()
        .map_err(q("lineage candidates"))
}

type Found = (Replay, Option<String>, Option<String>, String);

fn find_replay(
    conn: &Connection,
    key: &CaptureKey,
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
            s.query_row(params![key.rollout, key.attempt, conversation], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, Option<String>>(1)?,
                    r.get::<_, Option<u16>>(2)?,
                    r.get::<_, Option<String>>(3)?,
                    r.get::<_, String>(4)?,
                    r.get::<_, Option<String>>(5)?,
                    r.get::<_, Option<String>>(6)?,
                ))
            })
            .optional()
        })
        .map_err(q("replay lookup"))?;
    let Some((call_id, from, status, ct, digest, output_fp, usage)) = hit else {
        return Ok(None);
    };
    let Some(body) = get_body(conn, &digest)? else {
        return Ok(None);
    };
    Ok(Some((
        Replay {
            source_call_id: from.unwrap_or(call_id),
            http_status: status.unwrap_or(200),
            content_type: ct,
            body,
        },
        output_fp,
        usage,
        digest,
    )))
}

/// Records a request refused before admission.
pub fn reject(conn: &Connection, r: &Rejected) -> Result<String, GatewayError> {
    let seq = r.seq;
    let call_id = format!("{}#{seq}", r.capture_key);
    let request_digest = r
        .request
        .as_deref()
        .map(|b| store_body(conn, b))
        .transpose()?;
    conn.prepare_cached(
        "INSERT INTO calls (call_id, capture_key, rollout, attempt, seq, route, stream,
            request_digest, items, lineage, status, http_status, error, admitted_ms, finished_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, 0, ?7, '[]', 'none', ?8, ?9, ?10, ?11, ?11)",
    )
    .and_then(|mut s| {
        s.execute(params![
            call_id,
            r.capture_key,
            r.key
                .as_ref()
                .map_or(r.capture_key.as_str(), |k| k.rollout.as_str()),
            r.key.as_ref().map_or(0, |k| k.attempt),
            seq,
            r.route.map_or("unknown", Route::name),
            request_digest,
            r.status,
            r.http_status,
            r.error,
            r.admitted_ms,
        ])
    })
    .map_err(q("insert rejected call"))?;
    Ok(call_id)
}

/// Records how a call ended.
pub fn finish(conn: &Connection, call_id: &str, f: &Finish) -> Result<(), GatewayError> {
    let response_digest = f
        .response
        .as_deref()
        .map(|b| store_body(conn, b))
        .transpose()?;
    conn.prepare_cached(
        "UPDATE calls SET status = ?2, http_status = ?3, content_type = ?4, error = ?5,
            response_digest = ?6, usage = ?7, output_fp = ?8, upstream_ms = ?9,
            first_byte_ms = ?10, finished_ms = ?11
         WHERE call_id = ?1",
    )
    .and_then(|mut s| {
        s.execute(params![
            call_id,
            f.status,
            f.http_status,
            f.content_type,
            f.error,
            response_digest,
            f.usage.as_ref().map(Value::to_string),
            f.output_fp,
            f.upstream_ms,
            f.first_byte_ms,
            f.finished_ms,
        ])
    })
    .map_err(q("finish call"))?;
    let rollout: Option<String> = conn
        .prepare_cached("SELECT rollout FROM calls WHERE call_id = ?1")
        .and_then(|mut s| s.query_row([call_id], |r| r.get(0)).optional())
        .map_err(q("finish call"))?;
    if let Some(rollout) = rollout {
        settle_pending(conn, &rollout)?;
    }
    Ok(())
}

fn earlier_in_flight(
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
    .map_err(q("in-flight check"))
}

/// Resolves the parents of `rollout`'s calls whose lineage waited on a call in flight.
fn settle_pending(conn: &Connection, rollout: &str) -> Result<(), GatewayError> {
    let pending: Vec<(String, String, Option<String>, i64)> = {
        let mut stmt = conn
            .prepare_cached(
                "SELECT call_id, items, model_fp, admitted_ms FROM calls
                 WHERE rollout = ?1 AND lineage = 'pending' ORDER BY admitted_ms, seq",
            )
            .map_err(q("pending lineage"))?;
        let rows = stmt
            .query_map([rollout], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
            })
            .map_err(q("pending lineage"))?;
        rows.collect::<Result<_, _>>()
            .map_err(q("pending lineage"))?
    };
    for (call_id, items, model_fp, admitted_ms) in pending {
        let items: Vec<String> = serde_json::from_str(&items).unwrap_or_default();
        let candidates = match &model_fp {
            Some(fp) => candidates(conn, rollout, fp)?,
            None => Vec::new(),
        };
        let (lineage, parent, reason) = match resolve(model_fp.is_some(), &items, &candidates) {
            Lineage::Resolved(p) => ("resolved", Some(p), None),
            Lineage::Root(r) => {
                if earlier_in_flight(conn, rollout, &call_id, admitted_ms)? {
                    continue;
                }
                ("root", None, Some(r.name()))
            }
        };
        conn.prepare_cached(
            "UPDATE calls SET lineage = ?2, parent_call_id = ?3, lineage_reason = ?4
             WHERE call_id = ?1",
        )
        .and_then(|mut s| s.execute(params![call_id, lineage, parent, reason]))
        .map_err(q("settle lineage"))?;
    }
    Ok(())
}

/// Marks calls a previous run of the gateway left in flight as interrupted and settles the
/// lineage that waited on them.
pub fn sweep_interrupted(conn: &Connection) -> Result<usize, GatewayError> {
    let n = conn
        .execute(
            "UPDATE calls SET status = 'interrupted',
                error = 'the gateway stopped before the call ended'
             WHERE status = 'in_flight'",
            [],
        )
        .map_err(q("sweep interrupted calls"))?;
    conn.execute(
        "UPDATE calls SET lineage = 'root' WHERE lineage = 'pending'",
        [],
    )
    .map_err(q("sweep interrupted calls"))?;
    Ok(n)
}

/// Records that the whole reply reached the caller.
pub fn delivered(conn: &Connection, call_id: &str, ms: i64) -> Result<(), GatewayError> {
    conn.prepare_cached("UPDATE calls SET delivered_ms = ?2 WHERE call_id = ?1")
        .and_then(|mut s| s.execute(params![call_id, ms]))
        .map_err(q("mark delivered"))?;
    Ok(())
}

const COLUMNS: &str = "call_id, capture_key, rollout, attempt, seq, route, stream, model,
    request_digest, conversation_digest, items, model_fp, output_fp, parent_call_id, lineage,
    lineage_reason, status, http_status, content_type, error, replayed_from, response_digest,
    usage, admitted_ms, upstream_ms, first_byte_ms, finished_ms, delivered_ms";

fn read_row(r: &Row<'_>) -> rusqlite::Result<CallRecord> {
    let items: String = r.get(10)?;
    let usage: Option<String> = r.get(22)?;
    Ok(CallRecord {
        call_id: r.get(0)?,
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
        status: r.get(16)?,
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
    })
}

/// Rows of `rollout` (or every row), in admission order.
pub fn rows(conn: &Connection, rollout: Option<&str>) -> Result<Vec<CallRecord>, GatewayError> {
    let sql = format!(
        "SELECT {COLUMNS} FROM calls WHERE ?1 IS NULL OR rollout = ?1
         ORDER BY admitted_ms, attempt, seq"
    );
    let mut stmt = conn.prepare_cached(&sql).map_err(q("read calls"))?;
    let rows = stmt
        .query_map([rollout], read_row)
        .map_err(q("read calls"))?;
    rows.collect::<Result<_, _>>().map_err(q("read calls"))
}

/// The body stored under `digest`.
pub fn body(conn: &Connection, digest: &str) -> Result<Option<Vec<u8>>, GatewayError> {
    get_body(conn, digest)
}

/// Every row of `rollout` and every body they reference.
pub fn export(conn: &Connection, rollout: &str) -> Result<Vec<LedgerRecord>, GatewayError> {
    let calls = rows(conn, Some(rollout))?;
    let digests: BTreeSet<&String> = calls
        .iter()
        .flat_map(|c| c.request_digest.iter().chain(c.response_digest.iter()))
        .collect();
    let mut out = Vec::with_capacity(calls.len() + digests.len());
    for d in digests {
        if let Some(bytes) = get_body(conn, d)? {
            out.push(LedgerRecord::Body(BodyRecord {
                digest: d.clone(),
                bytes,
            }));
        }
    }
    out.extend(calls.into_iter().map(|c| LedgerRecord::Call(Box::new(c))));
    Ok(out)
}

/// Installs exported records for the rollouts they name. Every record must be of an attempt
/// before `attempt`, the one that continues. Of what this ledger already held for those
/// rollouts, answered calls of earlier attempts stay: a call a dead execution made after the
/// checkpoint was answered for exactly that conversation, so the continuing attempt replays it
/// rather than paying for it again. Everything else (calls that never ended, rows of `attempt`
/// or later) is dropped; a record whose call this ledger still holds is not inserted twice.
pub fn install(
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
        for d in c.request_digest.iter().chain(c.response_digest.iter()) {
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
            .map_err(q("clear rollout before install"))?;
    }
    let mut bodies = 0;
    let mut calls = 0;
    for r in records {
        match r {
            LedgerRecord::Body(b) => {
                put_body(conn, &b.digest, &b.bytes)?;
                bodies += 1;
            }
            LedgerRecord::Call(c) => {
                let held: bool = conn
                    .query_row(
                        "SELECT EXISTS(SELECT 1 FROM calls WHERE call_id = ?1)",
                        [&c.call_id],
                        |row| row.get(0),
                    )
                    .map_err(q("look up an installed call"))?;
                if !held {
                    insert_record(conn, c)?;
                    calls += 1;
                }
            }
        }
    }
    Ok(InstallReport {
        rollouts,
        calls,
        bodies,
        dropped,
    })
}

fn insert_record(conn: &Connection, record: &CallRecord) -> Result<(), GatewayError> {
    // A call in flight when exported never ends here: record it as interrupted, and settle
    // lineage that waited for it.
    let mut fixed;
    let mut c = record;
    if c.status == "in_flight" || c.lineage == "pending" {
        fixed = c.clone();
        if fixed.status == "in_flight" {
            fixed.status = "interrupted".into();
            fixed.error = Some("the call was in flight when its records were exported".into());
        }
        if fixed.lineage == "pending" {
            fixed.lineage = "root".into();
        }
        c = &fixed;
    }
    let sql = format!(
        "INSERT INTO calls ({COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11,
         ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22, ?23, ?24, ?25, ?26, ?27, ?28)"
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
            ])
        })
        .map_err(q("install call"))?;
    Ok(())
}

#[cfg(test)]
#[expect(clippy::unwrap_used)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::conversation::{chat_turn, fingerprint, read_request};

    fn conn() -> Connection {
        let mut c = Connection::open_in_memory().unwrap();
        crate::ledger::schema::prepare(&mut c, std::path::Path::new(":memory:")).unwrap();
        c
    }

    fn call(seq: i64, body: &Value) -> NewCall {
        NewCall {
            key: CaptureKey::new("r", 0).unwrap(),
            seq,
            route: Route::Chat,
            request: bytes::Bytes::from(body.to_string()),
            view: Some(read_request(Route::Chat, body)),
            admitted_ms: 1000 + seq,
            replay: false,
        }
    }

    fn lineage_of(c: &Connection, id: &str) -> (String, Option<String>, Option<String>) {
        c.query_row(
            "SELECT lineage, parent_call_id, lineage_reason FROM calls WHERE call_id = ?1",
            [id],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap()
    }

    #[test]
    fn child_admitted_before_its_parent_is_recorded_waits_then_resolves() {
        let c = conn();
        let user = json!({"role": "user", "content": "go"});
        let answer = json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "bash", "arguments": "{\"command\":\"ls\"}"}}]});
        let parent = json!({"messages": [user]});
        let child = json!({"messages": [user, answer, {"role": "tool", "tool_call_id": "a", "content": "x"}]});
        begin(&c, &call(0, &parent)).unwrap();
        begin(&c, &call(1, &child)).unwrap();
        assert_eq!(lineage_of(&c, "r#1").0, "pending");
        let done = Finish {
            status: "ok",
            response: Some(b"reply".to_vec()),
            output_fp: Some(fingerprint(&[chat_turn(&answer)])),
            finished_ms: 2000,
            ..Finish::default()
        };
        finish(&c, "r#0", &done).unwrap();
        assert_eq!(
            lineage_of(&c, "r#1"),
            ("resolved".into(), Some("r#0".into()), None)
        );
    }

    #[test]
    fn waiting_child_becomes_a_root_when_no_parent_appears() {
        let c = conn();
        let user = json!({"role": "user", "content": "go"});
        let other = json!({"role": "assistant", "content": "something else"});
        begin(&c, &call(0, &json!({"messages": [user]}))).unwrap();
        begin(&c, &call(1, &json!({"messages": [user, other, user]}))).unwrap();
        let failed = Finish {
            status: "upstream_status",
            finished_ms: 2000,
            ..Finish::default()
        };
        finish(&c, "r#0", &failed).unwrap();
        assert_eq!(
            lineage_of(&c, "r#1"),
            ("root".into(), None, Some("no_match".into()))
        );
    }
}
