//! The launch record: what the supervisor started and how it ended.
//!
//! `ended` is written the moment the harness is reaped, before any cleanup,
//! so a park request that races a finished launch sees the result and keeps
//! it instead of pausing or relaunching.

use serde::{Deserialize, Serialize};

use crate::version::FormatError;

/// Version of [`LaunchRecord`].
pub const LAUNCH_RECORD_VERSION: u32 = 1;

/// The environment variable that tags every process of a launch.
pub const LAUNCH_TAG_VAR: &str = "ROLLPOINT_LAUNCH";

/// Where a launch is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LaunchPhase {
    /// Held by a pause file before the harness was started.
    Held,
    /// The harness is running (or paused by a checkpoint).
    Running,
    /// A stop file was present: the harness was never started.
    NeverStarted,
    /// The harness was reaped; `ended` is set.
    Ended,
}

/// How the harness process ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Ended {
    /// Exit code when it exited, `None` when a signal killed it.
    pub exit_code: Option<i32>,
    /// The signal that killed it, if any.
    pub signal: Option<i32>,
    /// Wall-clock time of the reap, Unix milliseconds.
    pub at_ms: u64,
}

/// The launch record, `launch.json` in the session directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LaunchRecord {
    pub v: u32,
    pub launch_id: String,
    pub argv: Vec<String>,
    pub phase: LaunchPhase,
    /// Pid of the supervisor that owns the launch.
    pub supervisor_pid: u32,
    /// Pid and start time (clock ticks since boot) of the harness.
    pub pid: Option<u32>,
    pub start_time: Option<u64>,
    /// cgroup v2 directory of the launch, when one was created.
    pub cgroup_v2: Option<String>,
    /// cgroup v1 freezer directory of the launch, when one was created.
    pub cgroup_v1_freezer: Option<String>,
    pub started_at_ms: Option<u64>,
    pub ended: Option<Ended>,
}

impl LaunchRecord {
    /// Reads a launch record, rejecting unknown versions by name.
    pub fn decode(bytes: &[u8]) -> Result<Self, FormatError> {
        crate::version::decode("launch record", LAUNCH_RECORD_VERSION, bytes)
    }
}
