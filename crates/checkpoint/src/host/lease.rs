//! The lease: a checkpoint left open past the last call's deadline plus
//! the grace is aborted by a watcher, so a coordinator that vanishes never
//! leaves admission closed.

use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::time::Instant;

use super::Inner;

impl Inner {
    /// Extends the lease of an open checkpoint to cover a call lasting up
    /// to `timeout`, plus the grace.
    pub(super) fn renew(&self, timeout: Duration) {
        if self.machine().active().is_none() {
            return;
        }
        let until = Instant::now() + timeout + self.config.lease_grace;
        let mut lease = self.lease();
        *lease = Some(lease.map_or(until, |l| l.max(until)));
    }

    /// Starts the lease of the checkpoint just opened (epoch `epoch`) and
    /// the watcher that aborts it when the lease runs out.
    pub(super) fn start_lease(self: &Arc<Self>, epoch: u64, timeout: Duration) {
        *self.lease() = Some(Instant::now() + timeout + self.config.lease_grace);
        let weak = Arc::downgrade(self);
        tokio::spawn(watch_lease(weak, epoch));
    }

    pub(super) fn lease_remaining(&self) -> Option<u64> {
        self.machine().active()?;
        let lease = (*self.lease())?;
        let left = lease.saturating_duration_since(Instant::now());
        Some(u64::try_from(left.as_millis()).unwrap_or(u64::MAX))
    }
}

/// Waits out the lease of checkpoint epoch `epoch`; aborts the checkpoint
/// if the lease runs out while it is still open. Retries a failed abort.
async fn watch_lease(weak: Weak<Inner>, epoch: u64) {
    loop {
        let deadline = {
            let Some(inner) = weak.upgrade() else { return };
            if inner.machine().expired(epoch).is_none() {
                return;
            }
            let Some(deadline) = *inner.lease() else {
                return;
            };
            deadline
        };
        if Instant::now() < deadline {
            tokio::time::sleep_until(deadline).await;
            continue;
        }
        let Some(inner) = weak.upgrade() else { return };
        let Some(id) = inner.machine().expired(epoch).map(str::to_owned) else {
            return;
        };
        let lease_now = *inner.lease();
        if lease_now.is_some_and(|l| l > Instant::now()) {
            continue;
        }
        if inner.abort(&id, inner.config.lease_grace).await.is_ok() {
            return;
        }
        drop(inner);
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}
