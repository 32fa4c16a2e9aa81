//! What the agent loop and a cancellation share: the engine behind one mutex, who owns the
//! end of the run, the running tool, the exit codes and the result writer. A leaf: it imports
//! neither the runner, the loop nor the cancellation.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use crate::atomic;
use crate::journal::Journal;
use crate::result::{LaunchStats, WorkerResult};
use crate::tools::capped::Capped;
use crate::transcript::State;

/// Exit codes. A missing result with a non-zero exit is an infrastructure failure.
pub mod exit {
    /// The run ended without error: the model stopped or a limit was reached.
    pub const OK: i32 = 0;
    /// The run ended with a `transient` or `fatal` error, recorded in the result.
    pub const ERROR: i32 = 1;
    /// The command line was unusable.
    pub const USAGE: i32 = 2;
    /// The result could not be written.
    pub const NO_RESULT: i32 = 74;
    /// Stopped by SIGTERM or SIGINT; a `cancelled` result was written.
    pub const CANCELLED: i32 = 143;
}

/// Who owns the end of the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    Running,
    Cancelling,
    Finishing,
}

/// A tool call running now, with its output so far.
#[derive(Debug)]
pub(crate) struct Running {
    pub call_id: String,
    pub output: Arc<Mutex<Capped>>,
}

#[derive(Debug)]
pub(crate) struct Shared {
    pub phase: Phase,
    pub state: State,
    pub journal: Journal,
    pub stats: LaunchStats,
    pub running: Option<Running>,
}

#[derive(Debug)]
pub(crate) struct Engine {
    pub shared: Mutex<Shared>,
    pub running_group: Arc<Mutex<Option<nix::unistd::Pid>>>,
    pub result_path: PathBuf,
}

impl Engine {
    /// The shared state, while the run is still the loop's to run. Otherwise this thread
    /// stops here for good: the process is about to exit on another thread.
    pub(crate) fn lock_running(&self) -> MutexGuard<'_, Shared> {
        let guard = self.shared.lock().unwrap_or_else(PoisonError::into_inner);
        if guard.phase != Phase::Running {
            drop(guard);
            park_forever();
        }
        guard
    }
}

pub(crate) fn park_forever() -> ! {
    loop {
        std::thread::park();
    }
}

/// Writes `result` atomically; logs and reports failure.
pub(crate) fn write_result(path: &Path, result: &WorkerResult) -> bool {
    let bytes = match serde_json::to_vec_pretty(result) {
        Ok(b) => b,
        Err(e) => {
            log(&format!("result {}: cannot encode: {e}", path.display()));
            return false;
        }
    };
    match atomic::write_atomic(path, &bytes) {
        Ok(()) => true,
        Err(e) => {
            log(&format!("result {}: cannot write: {e}", path.display()));
            false
        }
    }
}

pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Writes one diagnostic line to stderr.
pub(crate) fn log(message: &str) {
    eprintln!("rollpoint-worker: {message}");
}
