//! The ledger's records: one call row, one body. The same types are the export format; their
//! JSONL encoding carries a version on every line and readers reject unknown versions.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::digest::sha256_hex;
use crate::errors::GatewayError;

/// The export record format version.
pub const RECORD_VERSION: u32 = 1;

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
    /// `in_flight`, `ok`, `replayed`, `interrupted`, `upstream_status`, `upstream_unreachable`,
    /// `upstream_broken`, `invalid_json`, `unknown_capture_key`, `attempt_fenced`,
    /// `body_too_large`, `unknown_route`, `route_not_served`.
    pub status: String,
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
        match value.get("v") {
            Some(Value::Number(n)) if n.as_u64() == Some(u64::from(RECORD_VERSION)) => {}
            Some(other) => {
                return Err(GatewayError::UnknownRecordVersion {
                    line: line_no,
                    found: other.to_string(),
                    supported: RECORD_VERSION,
                });
            }
            None => return Err(bad("missing field `v`".into())),
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
