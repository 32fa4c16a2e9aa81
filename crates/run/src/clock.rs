//! The run's wall clock: Unix time in milliseconds, for event times and
//! the ids of checkpoints, forks and restores. A module of its own so the
//! controller and the event log both read it without importing each other.

use std::time::{SystemTime, UNIX_EPOCH};

/// Unix time in milliseconds (0 before the epoch).
pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
