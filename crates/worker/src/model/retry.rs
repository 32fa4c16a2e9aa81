//! When to retry a model call and how long to wait: pure policy, kept apart from the HTTP code.

use std::time::Duration;

const FIRST_DELAY: Duration = Duration::from_millis(250);
const MAX_DELAY: Duration = Duration::from_secs(8);

/// Delay before retry number `retry` (0-based): 250 ms doubling, at most 8 s.
pub fn backoff(retry: u32) -> Duration {
    FIRST_DELAY
        .saturating_mul(2u32.saturating_pow(retry.min(16)))
        .min(MAX_DELAY)
}

/// Whether an HTTP status is worth retrying: timeouts, conflicts with an ongoing checkpoint,
/// rate limits and server errors are; every other refusal is final.
pub fn status_is_transient(status: u16) -> bool {
    matches!(status, 408 | 409 | 425 | 429) || (500..600).contains(&status)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_and_caps() {
        assert_eq!(backoff(0), Duration::from_millis(250));
        assert_eq!(backoff(2), Duration::from_secs(1));
        assert_eq!(backoff(10), MAX_DELAY);
        assert_eq!(backoff(u32::MAX), MAX_DELAY);
    }

    #[test]
    fn statuses() {
        assert!(status_is_transient(503));
        assert!(status_is_transient(429));
        assert!(!status_is_transient(400));
        assert!(!status_is_transient(401));
    }
}
