//! Recording how a call ended, then settling the lineage of calls that waited on it.

use rusqlite::{Connection, OptionalExtension as _, params};
use serde_json::Value;

use crate::errors::GatewayError;
use crate::ledger::call_id::CallId;
use crate::ledger::status::CallStatus;
use crate::ledger::{bodies, parents};

/// How a call ended.
#[derive(Debug)]
pub struct Finish {
    pub status: CallStatus,
    pub http_status: Option<u16>,
    pub content_type: Option<String>,
    pub error: Option<String>,
    pub response: Option<Vec<u8>>,
    pub usage: Option<Value>,
    pub output_fp: Option<String>,
    pub upstream_ms: Option<i64>,
    pub first_byte_ms: Option<i64>,
    pub finished_ms: i64,
    /// The call's tokens, or why it has none, when capture is on.
    pub tokens: Option<crate::tokens::Captured>,
    /// The version of the weights that answered it.
    pub policy_version: Option<String>,
}

impl Finish {
    /// A call that ended as `status` at `finished_ms`, with nothing else known.
    #[must_use]
    pub fn ended(status: CallStatus, finished_ms: i64) -> Self {
        Self {
            status,
            http_status: None,
            content_type: None,
            error: None,
            response: None,
            usage: None,
            output_fp: None,
            upstream_ms: None,
            first_byte_ms: None,
            finished_ms,
            tokens: None,
            policy_version: None,
        }
    }
}

/// Records how a call ended.
pub(crate) fn finish(conn: &Connection, id: &CallId, f: &Finish) -> Result<(), GatewayError> {
    let call_id = id.to_string();
    let call_id = call_id.as_str();
    let response_digest = f
        .response
        .as_deref()
        .map(|b| bodies::store(conn, b))
        .transpose()?;
    let (tokens_digest, tokens_fault) = match &f.tokens {
        Some(Ok(t)) => (Some(bodies::store(conn, &t.encode())?), None),
        Some(Err(fault)) => (None, serde_json::to_string(fault).ok()),
        None => (None, None),
    };
    let err = GatewayError::ledger("finish call");
    conn.prepare_cached(
        "UPDATE calls SET status = ?2, http_status = ?3, content_type = ?4, error = ?5,
            response_digest = ?6, usage = ?7, output_fp = ?8, upstream_ms = ?9,
            first_byte_ms = ?10, finished_ms = ?11, tokens_digest = ?12, tokens_fault = ?13,
            policy_version = ?14
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
            tokens_digest,
            tokens_fault,
            f.policy_version,
        ])
    })
    .map_err(&err)?;
    let rollout: Option<String> = conn
        .prepare_cached("SELECT rollout FROM calls WHERE call_id = ?1")
        .and_then(|mut s| s.query_row([call_id], |r| r.get(0)).optional())
        .map_err(&err)?;
    if let Some(rollout) = rollout {
        parents::settle_pending(conn, &rollout)?;
    }
    Ok(())
}

#[cfg(test)]
#[expect(clippy::unwrap_used)]
mod tests {
    use serde_json::json;

    use super::*;
    use rollpoint_proto::key::AttemptKey;

    use crate::conversation::{Route, chat_turn, fingerprint, read_request};
    use crate::ledger::begin::{NewCall, begin};
    use crate::ledger::schema::in_memory;

    fn call(seq: i64, body: &Value) -> NewCall {
        NewCall {
            id: r(seq),
            route: Route::Chat,
            request: bytes::Bytes::from(body.to_string()),
            view: Some(read_request(Route::Chat, body)),
            admitted_ms: 1000 + seq,
            replay: false,
        }
    }

    fn r(seq: i64) -> CallId {
        CallId::new(AttemptKey::of("r", 0).unwrap(), seq)
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
        let c = in_memory();
        let user = json!({"role": "user", "content": "go"});
        let answer = json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "bash", "arguments": "{\"command\":\"ls\"}"}}]});
        let parent = json!({"messages": [user]});
        let child = json!({"messages": [user, answer, {"role": "tool", "tool_call_id": "a", "content": "x"}]});
        begin(&c, &call(0, &parent)).unwrap();
        begin(&c, &call(1, &child)).unwrap();
        assert_eq!(lineage_of(&c, "r#1").0, "pending");
        let done = Finish {
            response: Some(b"reply".to_vec()),
            output_fp: Some(fingerprint(&[chat_turn(&answer)])),
            ..Finish::ended(CallStatus::Ok, 2000)
        };
        finish(&c, &r(0), &done).unwrap();
        assert_eq!(
            lineage_of(&c, "r#1"),
            ("resolved".into(), Some("r#0".into()), None)
        );
    }

    #[test]
    fn waiting_child_becomes_a_root_when_no_parent_appears() {
        let c = in_memory();
        let user = json!({"role": "user", "content": "go"});
        let other = json!({"role": "assistant", "content": "something else"});
        begin(&c, &call(0, &json!({"messages": [user]}))).unwrap();
        begin(&c, &call(1, &json!({"messages": [user, other, user]}))).unwrap();
        let failed = Finish::ended(CallStatus::UpstreamStatus, 2000);
        finish(&c, &r(0), &failed).unwrap();
        assert_eq!(
            lineage_of(&c, "r#1"),
            ("root".into(), None, Some("no_match".into()))
        );
    }
}
