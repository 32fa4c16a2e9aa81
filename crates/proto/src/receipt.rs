//! Receipts: what a pause, continue or stop did, member by member.
//!
//! A receipt is the answer a checkpoint relies on, so it says how the result
//! was confirmed (method, rounds, states seen) and, when it failed, why.

use serde::{Deserialize, Serialize};

use crate::version::FormatError;

/// Version of [`Receipt`].
pub const RECEIPT_VERSION: u32 = 1;

/// The operation a receipt is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Op {
    Pause,
    Continue,
    Stop,
    /// Cleanup after the harness returned on its own.
    Cleanup,
}

/// How processes were frozen or signalled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Method {
    CgroupV2,
    CgroupV1,
    Sigstop,
    /// Signals only (stop and cleanup without a freezer).
    Signals,
}

impl Method {
    /// The name used on the wire (`cgroup_v2`, `cgroup_v1`, `sigstop`, `signals`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::CgroupV2 => "cgroup_v2",
            Self::CgroupV1 => "cgroup_v1",
            Self::Sigstop => "sigstop",
            Self::Signals => "signals",
        }
    }
}

/// The outcome of an operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Done and confirmed.
    Confirmed,
    /// Could not be confirmed; for a pause, it was undone.
    Failed,
    /// The launch had already ended: nothing to pause; its result stands.
    AlreadyEnded,
    /// The launch was not running (never started, or not paused).
    NotRunning,
}

/// One process of the launch as last seen.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct Member {
    pub pid: u32,
    /// Start time in clock ticks since boot; absent for members frozen by
    /// their cgroup, which are listed from `cgroup.procs` without a stat
    /// read each.
    pub start_time: Option<u64>,
    /// State letter from `/proc/<pid>/stat`, `X` when gone, or `F` when
    /// frozen by the launch's cgroup.
    pub state: char,
}

/// A receipt, appended as one line to `receipts.jsonl` and returned on the
/// control socket.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct Receipt {
    pub v: u32,
    pub op: Op,
    pub launch_id: String,
    pub method: Method,
    pub outcome: Outcome,
    pub members: Vec<Member>,
    /// Scan-and-signal rounds (sweeps) or poll rounds (freezers).
    pub rounds: u32,
    pub duration_us: u64,
    /// Why it failed, naming the pids and states that blocked it.
    pub reason: Option<String>,
    /// For stop and cleanup: nothing of the launch is left alive.
    pub cleanup_confirmed: Option<bool>,
    /// The harness's own exit code, when known.
    pub exit_code: Option<i32>,
}

impl Receipt {
    /// Reads a receipt, rejecting unknown versions by name.
    pub fn decode(bytes: &[u8]) -> Result<Self, FormatError> {
        crate::version::decode("receipt", RECEIPT_VERSION, bytes)
    }

    /// A receipt for a request that needed no action: the launch had
    /// already ended, or was not running.
    pub fn no_action(op: Op, launch_id: &str, outcome: Outcome, exit_code: Option<i32>) -> Self {
        Self {
            v: RECEIPT_VERSION,
            op,
            launch_id: launch_id.to_owned(),
            method: Method::Signals,
            outcome,
            members: Vec::new(),
            rounds: 0,
            duration_us: 0,
            reason: None,
            cleanup_confirmed: None,
            exit_code,
        }
    }

    /// True when the operation did what was asked.
    pub fn confirmed(&self) -> bool {
        self.outcome == Outcome::Confirmed
    }

    /// The receipt as one line of the receipts log, newline included.
    pub fn encode_line(&self) -> Result<Vec<u8>, serde_json::Error> {
        let mut line = serde_json::to_vec(self)?;
        line.push(b'\n');
        Ok(line)
    }
}

/// A line of a receipts log could not be read.
#[derive(Debug, thiserror::Error)]
#[error("receipts line {line}: {source}")]
pub struct LogError {
    /// 1-based.
    pub line: usize,
    pub source: FormatError,
}

/// A launch's receipts, read back from its `receipts.jsonl`.
///
/// The supervisor appends each receipt as one line and syncs it before it
/// answers, so every whole line is a receipt it gave. A last line without
/// its newline was cut short by a crash mid-append: it is counted in
/// `torn_tail`, not decoded; no receipt was given for it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReceiptLog {
    pub receipts: Vec<Receipt>,
    /// Bytes after the last newline.
    pub torn_tail: usize,
}

impl ReceiptLog {
    /// Reads a log; a whole line that is not a receipt of this version is
    /// an error naming its line.
    pub fn decode(bytes: &[u8]) -> Result<Self, LogError> {
        let (whole, tail) = match bytes.iter().rposition(|&b| b == b'\n') {
            Some(end) => bytes.split_at(end + 1),
            None => (&[][..], bytes),
        };
        let mut receipts = Vec::new();
        for (i, line) in whole.split(|&b| b == b'\n').enumerate() {
            if line.is_empty() {
                continue;
            }
            let receipt = Receipt::decode(line).map_err(|source| LogError {
                line: i + 1,
                source,
            })?;
            receipts.push(receipt);
        }
        Ok(Self {
            receipts,
            torn_tail: tail.len(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn method_names_match_the_wire() {
        for m in [
            Method::CgroupV2,
            Method::CgroupV1,
            Method::Sigstop,
            Method::Signals,
        ] {
            let wire = serde_json::to_string(&m).expect("encodes");
            assert_eq!(wire, format!("\"{}\"", m.as_str()));
        }
    }

    #[test]
    fn receipt_round_trips_and_rejects_unknown_fields() {
        let r = Receipt::no_action(Op::Pause, "l1", Outcome::AlreadyEnded, Some(7));
        let bytes = serde_json::to_vec(&r).expect("encodes");
        assert_eq!(Receipt::decode(&bytes).expect("decodes"), r);
        let mut v: serde_json::Value = serde_json::from_slice(&bytes).expect("json");
        v["surprise"] = serde_json::json!(1);
        let err = Receipt::decode(v.to_string().as_bytes()).expect_err("unknown field");
        assert!(err.to_string().contains("surprise"), "{err}");
    }

    #[test]
    fn a_log_reads_whole_lines_and_reports_a_torn_tail() {
        let a = Receipt::no_action(Op::Pause, "l1", Outcome::NotRunning, None);
        let b = Receipt::no_action(Op::Stop, "l1", Outcome::AlreadyEnded, Some(3));
        let mut bytes = a.encode_line().expect("a");
        bytes.extend(b.encode_line().expect("b"));
        let whole = ReceiptLog::decode(&bytes).expect("whole");
        assert_eq!(whole.receipts, vec![a.clone(), b.clone()]);
        assert_eq!(whole.torn_tail, 0);

        let cut = &bytes[..bytes.len() - 10];
        let torn = ReceiptLog::decode(cut).expect("torn");
        assert_eq!(torn.receipts, vec![a]);
        assert_eq!(torn.torn_tail, b.encode_line().expect("b").len() - 10);

        assert_eq!(
            ReceiptLog::decode(b"").expect("empty"),
            ReceiptLog::default()
        );
    }

    #[test]
    fn a_log_names_the_line_it_cannot_read() {
        let a = Receipt::no_action(Op::Pause, "l1", Outcome::NotRunning, None);
        let mut bytes = a.encode_line().expect("a");
        bytes.extend(b"{\"v\":9}\n");
        let err = ReceiptLog::decode(&bytes).expect_err("version 9");
        assert_eq!(err.line, 2);
        assert!(err.to_string().contains("unknown version 9"), "{err}");
    }
}
