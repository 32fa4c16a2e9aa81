//! `RUN_DIR/lock`: one process drives a run at a time. `rollpoint run` and
//! `rollpoint resume` hold an exclusive `flock(2)` on it for their lifetime;
//! a second one (a resume while the run is still alive, say) is refused
//! before it sweeps or starts anything. The kernel drops the lock when its
//! holder dies, so a crashed runner never leaves it behind.

use std::fs::File;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::Path;

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};

use crate::errors::RunError;

/// The lock file under the run directory.
pub const LOCK_FILE: &str = "lock";

/// The held lock of a run directory.
#[derive(Debug)]
pub struct RunLock {
    _held: Flock<File>,
}

impl RunLock {
    /// Takes the lock of `run_dir`, or says that another process holds it.
    pub fn acquire(run_dir: &Path) -> Result<Self, RunError> {
        Self::try_acquire(run_dir)?.ok_or_else(|| RunError::state(run_dir.join(LOCK_FILE), "another rollpoint process (a run or a resume) is driving this run; wait for it to end"))
    }

    /// Whether another process drives `run_dir` now (holds its lock).
    pub fn held_elsewhere(run_dir: &Path) -> Result<bool, RunError> {
        Ok(Self::try_acquire(run_dir)?.is_none())
    }

    /// Takes the lock of `run_dir`; `None` when another process holds it.
    fn try_acquire(run_dir: &Path) -> Result<Option<Self>, RunError> {
        let path = run_dir.join(LOCK_FILE);
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .open(&path)
            .map_err(|e| RunError::io(&path, e))?;
        match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(held) => Ok(Some(Self { _held: held })),
            Err((_, Errno::EWOULDBLOCK)) => Ok(None),
            Err((_, errno)) => Err(RunError::io(&path, std::io::Error::from(errno))),
        }
    }
}
