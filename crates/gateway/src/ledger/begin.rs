//! Admitting a call: its id, its lineage (or `pending` while a possible parent is in flight),
//! the replay lookup, and its row.

use rusqlite::{Connection, params};

use crate::conversation::{RequestView, Route};
use crate::errors::GatewayError;
use crate::ledger::bodies;
use crate::ledger::call_id::CallId;
use crate::ledger::parents::{self, LineageColumns};
use crate::ledger::replay::{self, Replay};
use crate::ledger::status::CallStatus;
use crate::lineage::{Lineage, RootReason, resolve};

/// A call the pipeline admitted.
#[derive(Debug)]
pub struct NewCall {
    pub id: CallId,
    pub route: Route,
    pub request: bytes::Bytes,
    pub view: Option<RequestView>,
    pub admitted_ms: i64,
    pub replay: bool,
}

/// The admitted call's lineage and, if the conversation was answered before, the replay.
#[derive(Debug)]
pub struct Begun {
    pub lineage: Lineage,
    pub replay: Option<Replay>,
}

/// Admits a call: assigns its id, resolves its parent, looks for a replay, inserts the row.
pub(crate) fn begin(conn: &Connection, call: &NewCall) -> Result<Begun, GatewayError> {
    let key = &call.id.key;
    let capture_key = key.to_string();
    let rollout = key.rollout().as_str();
    let seq = call.id.seq;
    let call_id = call.id.to_string();
    let request_digest = bodies::store(conn, &call.request)?;
    let view = call.view.as_ref();
    let model_fp = view.and_then(RequestView::model_fp);
    let lineage = match view {
        None => Lineage::Root(RootReason::NotGeneration),
        Some(v) => {
            let candidates = match &model_fp {
                Some(fp) => parents::candidates(conn, rollout, fp)?,
                None => Vec::new(),
            };
            resolve(model_fp.is_some(), &v.items, &candidates)
        }
    };
    let found = match view {
        Some(v) if call.replay => replay::find(conn, key, &v.conversation_digest)?,
        _ => None,
    };
    // A parent may still be in flight (its reply not yet recorded): decide when it ends.
    let pending = parents::may_wait(&lineage)
        && parents::earlier_in_flight(conn, rollout, &call_id, call.admitted_ms)?;
    let columns = LineageColumns::of(&lineage, pending);
    let items = serde_json::to_string(&view.map(|v| v.items.clone()).unwrap_or_default())
        .unwrap_or_else(|_| "[]".into());
    let status = if found.is_some() {
        CallStatus::Replayed
    } else {
        CallStatus::InFlight
    };
    // A replayed call is answered, and so finished, when it is admitted.
    let answer = found.as_ref();
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
            rollout,
            key.attempt(),
            seq,
            call.route.name(),
            view.is_some_and(|v| v.stream),
            view.and_then(|v| v.model.clone()),
            request_digest,
            view.map(|v| v.conversation_digest.clone()),
            items,
            model_fp,
            columns.parent_call_id,
            columns.lineage,
            columns.lineage_reason,
            status,
            call.admitted_ms,
            answer.map(|a| &a.replay.source_call_id),
            answer.map(|a| a.replay.http_status),
            answer.and_then(|a| a.replay.content_type.as_ref()),
            answer.and_then(|a| a.output_fp.as_ref()),
            answer.and_then(|a| a.usage.as_ref()),
            answer.map(|a| &a.response_digest),
            answer.map(|_| call.admitted_ms),
        ])
    })
    .map_err(GatewayError::ledger("insert call"))?;
    Ok(Begun {
        lineage,
        replay: found.map(|f| f.replay),
    })
}
