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
    pub start_time: u64,
    /// State letter from `/proc/<pid>/stat` (`X` when gone).
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
