//! The participant's shared state, read and changed under its locks: the
//! phase machine, the lease, the abort generation and the status it adds up
//! to.

use std::sync::MutexGuard;
use std::time::Duration;

use tokio::time::Instant;

use super::Inner;
use crate::phase::Machine;
use crate::wire::Status;

impl Inner {
    pub(super) fn machine(&self) -> MutexGuard<'_, Machine> {
        // The machine is plain data changed in single steps: a panic
        // elsewhere cannot leave it half-changed, so a poisoned lock is used.
        self.machine
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(super) fn lease(&self) -> MutexGuard<'_, Option<Instant>> {
        self.lease
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(super) fn abort_generation(&self) -> u64 {
        *self.aborts.borrow()
    }

    /// Resolves once a resume or lease expiry happens after generation
    /// `seen`.
    pub(super) async fn aborted(&self, seen: u64) {
        let mut rx = self.aborts.subscribe();
        // The sender lives as long as `self`: the wait cannot fail.
        let _ended = rx.wait_for(|g| *g != seen).await;
    }

    pub(super) async fn status(&self) -> Status {
        self.renew(Duration::ZERO);
        let (phase, checkpoint) = {
            let m = self.machine();
            (m.phase(), m.active().map(str::to_owned))
        };
        Status {
            kind: self.kind,
            instance: self.instance.clone(),
            phase,
            checkpoint,
            lease_remaining_ms: self.lease_remaining(),
            readiness: self.participant.readiness().await.capped(),
        }
    }
}
