//! Small time helpers.

use std::time::{Duration, Instant};

/// Microseconds since `start`, saturating.
pub fn micros_since(start: Instant) -> u64 {
    u64::try_from(start.elapsed().as_micros()).unwrap_or(u64::MAX)
}

/// A poll interval that starts fine-grained and backs off: a freeze usually
/// lands within a few milliseconds, while a member in `D` can take seconds.
#[derive(Debug)]
pub struct Backoff {
    next: Duration,
    max: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Self::new()
    }
}

impl Backoff {
    pub fn new() -> Self {
        Self {
            next: Duration::from_micros(50),
            max: Duration::from_millis(10),
        }
    }

    pub fn sleep(&mut self) {
        std::thread::sleep(self.next);
        self.next = (self.next * 2).min(self.max);
    }
}
