//! The grace period after SIGTERM (`--grace-s`): when it runs out, and what of it is kept
//! for tearing down.

use std::time::{Duration, Instant};

use tokio::sync::watch;

/// Resolves when the grace period after a stop request has run out (a margin before it is
/// kept for tearing down); never without a request.
pub(super) async fn grace_over(mut asked: watch::Receiver<Option<Instant>>, grace: Duration) {
    let Ok(at) = asked.wait_for(Option::is_some).await.map(|at| *at) else {
        return std::future::pending().await;
    };
    if let Some(at) = at {
        tokio::time::sleep_until((at + grace.saturating_sub(teardown_margin(grace))).into()).await;
    }
}

/// What a grace period keeps for tearing down after a checkpoint (sandboxes, the gateway).
pub(super) fn teardown_margin(grace: Duration) -> Duration {
    Duration::from_secs(1).min(grace / 4)
}
