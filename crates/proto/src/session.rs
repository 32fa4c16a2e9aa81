//! Names of the files in a launch's session directory. The supervisor writes
//! them; the host and the supervisor's clients read them.

/// The launch record ([`crate::launch::LaunchRecord`]).
pub const LAUNCH_FILE: &str = "launch.json";
/// Present before a launch starts: it never starts.
pub const STOP_FILE: &str = "stop";
/// Present before a launch starts: it waits until the file is removed.
pub const PAUSE_FILE: &str = "pause";
/// Receipts, one JSON line per operation, appended in order
/// ([`crate::receipt::ReceiptLog`]).
pub const RECEIPTS_FILE: &str = "receipts.jsonl";
/// What a client froze when no supervisor answered, for its continue.
pub const FALLBACK_PAUSE_FILE: &str = "fallback-pause.json";
/// Exit status of `run` when a stop file kept the harness from starting.
pub const NEVER_STARTED_EXIT: i32 = 125;

/// Version of [`FallbackPause`].
pub const FALLBACK_PAUSE_VERSION: u32 = 1;

/// A process by identity: pid and start time (clock ticks since boot).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Identity {
    pub pid: u32,
    pub start_time: u64,
}

/// What a client froze when no supervisor answered ([`FALLBACK_PAUSE_FILE`]),
/// so that the next continue undoes exactly that.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FallbackPause {
    pub v: u32,
    /// The launch cgroup was frozen.
    pub cgroup: bool,
    /// Members stopped with SIGSTOP.
    pub signalled: Vec<Identity>,
    /// Members already stopped before the pause; left stopped.
    pub pre_stopped: Vec<Identity>,
}

impl FallbackPause {
    /// Reads a fallback pause record, rejecting unknown versions by name.
    pub fn decode(bytes: &[u8]) -> Result<Self, crate::version::FormatError> {
        crate::version::decode("fallback pause", FALLBACK_PAUSE_VERSION, bytes)
    }
}
