//! Names of the files in a launch's session directory. The supervisor writes
//! them; the host and the supervisor's clients read them.

/// The launch record ([`crate::launch::LaunchRecord`]).
pub const LAUNCH_FILE: &str = "launch.json";
/// Present before a launch starts: it never starts.
pub const STOP_FILE: &str = "stop";
/// Present before a launch starts: it waits until the file is removed.
pub const PAUSE_FILE: &str = "pause";
/// Receipts, one file per operation: `<seq>-<op>.json`.
pub const RECEIPTS_DIR: &str = "receipts";
/// What a client froze when no supervisor answered, for its continue.
pub const FALLBACK_PAUSE_FILE: &str = "fallback-pause.json";
/// Exit status of `run` when a stop file kept the harness from starting.
pub const NEVER_STARTED_EXIT: i32 = 125;
