//! Time budgets of every operation (defaults: docs/design/pause-strategies.md).

use std::time::Duration;

/// Every budget the engine obeys. Each is a setting: 120 s per command, 5 s
/// to confirm, 30 s for members in `D`, 10 s of stop grace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budgets {
    /// Upper bound for one pause, continue or stop command.
    pub command: Duration,
    /// How long a freeze or continue may take to be confirmed when no member
    /// is in uninterruptible sleep.
    pub confirm: Duration,
    /// How long members in `D` are waited for before the pause fails.
    pub d_state: Duration,
    /// Grace between SIGINT and SIGKILL on stop.
    pub stop_grace: Duration,
}

impl Default for Budgets {
    fn default() -> Self {
        Self {
            command: Duration::from_secs(120),
            confirm: Duration::from_secs(5),
            d_state: Duration::from_secs(30),
            stop_grace: Duration::from_secs(10),
        }
    }
}
