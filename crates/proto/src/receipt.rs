//! Receipts: what a pause, continue or stop did, member by member.
//!
//! A receipt is the answer a checkpoint relies on, so it says how the result
//! was confirmed (method, rounds, states seen) and, when it failed, why.

use serde::{Deserialize, Serialize};

use crate::FormatError;

/// Version of [`Receipt`].
pub const RECEIPT_VERSION: u32 = 1;

/// The operation a receipt is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
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

/// A receipt, written as `receipts/<seq>-<op>.json` and returned on the
/// control socket.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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
        crate::decode("receipt", RECEIPT_VERSION, bytes)
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
}
