//! The ledger's records: one call row, one body. The same types are the export format; their
//! JSONL encoding carries a version on every line and readers reject unknown versions.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::digest::sha256_hex;
use crate::errors::GatewayError;
use crate::ledger::status::CallStatus;

/// The export record format version (2: calls carry their tokens; version 1 lines, which
/// have none, are still read).
pub const RECORD_VERSION: u32 = 2;

/// One model call as the ledger holds it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallRecord {
    pub call_id: String,
    pub capture_key: String,
    pub rollout: String,
    pub attempt: u32,
    pub seq: i64,
    /// `chat`, `responses`, `messages`, `models`, or `unknown`.
    pub route: String,
    pub stream: bool,
    pub model: Option<String>,
    pub request_digest: Option<String>,
    pub conversation_digest: Option<String>,
    /// Digest of each conversation item, for prefix checks.
    pub items: Vec<String>,
    pub model_fp: Option<String>,
    pub output_fp: Option<String>,
    pub parent_call_id: Option<String>,
    /// `root`, `resolved`, `pending` (a possible parent is still in flight), or `none`
    /// (rejected before it was a call).
    pub lineage: String,
    pub lineage_reason: Option<String>,
    pub status: CallStatus,
    pub http_status: Option<u16>,
    pub content_type: Option<String>,
    pub error: Option<String>,
    pub replayed_from: Option<String>,
    pub response_digest: Option<String>,
    pub usage: Option<Value>,
    pub admitted_ms: i64,
    pub upstream_ms: Option<i64>,
    pub first_byte_ms: Option<i64>,
    pub finished_ms: Option<i64>,
    pub delivered_ms: Option<i64>,
    /// The body holding the call's [`CallTokens`](crate::tokens::CallTokens) document.
    #[serde(default)]
    pub tokens_digest: Option<String>,
    /// Why a captured call has no tokens.
    #[serde(default)]
    pub tokens_fault: Option<crate::tokens::TokenFault>,
    /// The version of the weights that answered it: the upstream's `X-Policy-Version`, else
    /// the version last announced to the gateway when it was sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy_version: Option<String>,
}

/// A stored body, addressed by its SHA-256.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BodyRecord {
    pub digest: String,
    pub bytes: Vec<u8>,
}

/// One exported ledger record.
#[derive(Debug, Clone, PartialEq)]
pub enum LedgerRecord {
    Call(Box<CallRecord>),
    Body(BodyRecord),
}

#[derive(Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum Line {
    Call {
        v: u32,
        #[serde(flatten)]
        call: Box<CallRecord>,
    },
    Body {
        v: u32,
        digest: String,
        base64: String,
    },
}

impl LedgerRecord {
    /// The record as one JSON line (without the newline).
    #[must_use]
    pub fn to_json(&self) -> String {
        let line = match self {
            Self::Call(call) => Line::Call {
                v: RECORD_VERSION,
                call: call.clone(),
            },
            Self::Body(b) => Line::Body {
                v: RECORD_VERSION,
                digest: b.digest.clone(),
                base64: STANDARD.encode(&b.bytes),
            },
        };
        // Strings, numbers and string-keyed maps only: serializing cannot fail.
        serde_json::to_string(&line).unwrap_or_default()
    }
}

impl CallRecord {
    /// The digests of every body the call references: request, response, tokens.
    pub fn bodies(&self) -> impl Iterator<Item = &String> {
        self.request_digest
            .iter()
            .chain(self.response_digest.iter())
            .chain(self.tokens_digest.iter())
    }

    /// This call as branch rollout `branch`'s copy of it: ids renamed from `rollout` to
    /// `branch` (its own, its capture key's, its parent's), the same attempt and answer, and
    /// `replayed_from` naming the source's call, so a branch that asks it again is answered
    /// from the ledger and says whose answer that was.
    #[must_use]
    pub fn for_branch(&self, rollout: &str, branch: &str) -> Self {
        let rename = |id: &str| {
            id.strip_prefix(rollout)
                .filter(|rest| rest.starts_with('#') || rest.starts_with("-a"))
                .map_or_else(|| id.to_owned(), |rest| format!("{branch}{rest}"))
        };
        let mut c = self.clone();
        c.call_id = rename(&self.call_id);
        c.capture_key = rename(&self.capture_key);
        c.rollout = branch.to_owned();
        c.parent_call_id = self.parent_call_id.as_deref().map(rename);
        if c.replayed_from.is_none() && self.status == CallStatus::Ok {
            c.replayed_from = Some(self.call_id.clone());
        }
        c
    }
}

/// Encodes records as JSONL.
#[must_use]
pub fn encode_jsonl(records: &[LedgerRecord]) -> Vec<u8> {
    let mut out = Vec::new();
    for r in records {
        out.extend_from_slice(r.to_json().as_bytes());
        out.push(b'\n');
    }
    out
}

/// Decodes JSONL records, checking each line's version and each body's digest.
pub fn decode_jsonl(bytes: &[u8]) -> Result<Vec<LedgerRecord>, GatewayError> {
    let mut out = Vec::new();
    for (i, line) in bytes.split(|b| *b == b'\n').enumerate() {
        let line_no = i + 1;
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let bad = |message: String| GatewayError::BadRecord {
            line: line_no,
            message,
        };
        let value: Value = serde_json::from_slice(line).map_err(|e| bad(e.to_string()))?;
        let v1 = value.get("v").and_then(Value::as_u64) == Some(1);
        match rollpoint_proto::check_version(&value, "ledger record", "v", RECORD_VERSION) {
            _ if v1 => {}
            Ok(()) => {}
            Err(rollpoint_proto::FormatError::UnknownVersion { found, .. }) => {
                return Err(GatewayError::UnknownRecordVersion {
                    line: line_no,
                    found: found.to_string(),
                    supported: RECORD_VERSION,
                });
            }
            Err(e) => return Err(bad(e.to_string())),
        }
        let parsed: Line = serde_json::from_value(value).map_err(|e| bad(e.to_string()))?;
        out.push(match parsed {
            Line::Call { call, .. } => LedgerRecord::Call(call),
            Line::Body { digest, base64, .. } => {
                let bytes = STANDARD
                    .decode(base64.as_bytes())
                    .map_err(|e| bad(format!("field `base64`: {e}")))?;
                if sha256_hex(&bytes) != digest {
                    return Err(bad(format!("body {digest} does not match its digest")));
                }
                LedgerRecord::Body(BodyRecord { digest, bytes })
            }
        });
    }
    Ok(out)
}

#[cfg(test)]
#[expect(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn call(status: CallStatus) -> CallRecord {
        CallRecord {
            call_id: "r-a1#0".into(),
            capture_key: "r-a1".into(),
            rollout: "r".into(),
            attempt: 1,
            seq: 0,
            route: "chat".into(),
            stream: true,
            model: Some("m".into()),
            request_digest: Some("d1".into()),
            conversation_digest: Some("c".into()),
            items: vec!["i".into()],
            model_fp: None,
            output_fp: None,
            parent_call_id: None,
            lineage: "root".into(),
            lineage_reason: Some("first_turn".into()),
            status,
            http_status: Some(200),
            content_type: None,
            error: None,
            replayed_from: Some("r#0".into()),
            response_digest: Some("d2".into()),
            usage: None,
            admitted_ms: 1,
            upstream_ms: None,
            first_byte_ms: None,
            finished_ms: Some(2),
            delivered_ms: None,
            tokens_digest: None,
            tokens_fault: None,
            policy_version: None,
        }
    }

    #[test]
    fn a_call_line_names_its_status_as_a_string() {
        let record = LedgerRecord::Call(Box::new(call(CallStatus::Replayed)));
        let line = record.to_json();
        assert_eq!(
            line,
            r#"{"kind":"call","v":2,"call_id":"r-a1#0","capture_key":"r-a1","rollout":"r","attempt":1,"seq":0,"route":"chat","stream":true,"model":"m","request_digest":"d1","conversation_digest":"c","items":["i"],"model_fp":null,"output_fp":null,"parent_call_id":null,"lineage":"root","lineage_reason":"first_turn","status":"replayed","http_status":200,"content_type":null,"error":null,"replayed_from":"r#0","response_digest":"d2","usage":null,"admitted_ms":1,"upstream_ms":null,"first_byte_ms":null,"finished_ms":2,"delivered_ms":null,"tokens_digest":null,"tokens_fault":null}"#
        );
        assert_eq!(decode_jsonl(line.as_bytes()).unwrap(), [record]);
    }

    #[test]
    fn a_call_line_of_an_unknown_status_is_refused() {
        let line = LedgerRecord::Call(Box::new(call(CallStatus::Ok)))
            .to_json()
            .replace(r#""status":"ok""#, r#""status":"finished""#);
        let err = decode_jsonl(line.as_bytes()).unwrap_err();
        assert!(
            matches!(&err, GatewayError::BadRecord { line: 1, message } if message.contains("finished")),
            "{err}"
        );
    }
}
