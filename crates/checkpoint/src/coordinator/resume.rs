//! Resume: in reverse prepare order, carrying on past failures (a
//! participant that cannot be reached resumes by itself when its lease runs
//! out).

use std::time::Duration;

use super::{CLEANUP_TIMEOUT, Coordinator, several};
use crate::errors::CoordinatorError;
use crate::wire::ResumeRequest;

impl Coordinator {
    /// Resumes `id` everywhere, in reverse prepare order, carrying on past
    /// failures; reports every failure at the end.
    pub async fn resume(&self, id: &str) -> Result<(), CoordinatorError> {
        self.resume_within(id, self.config.timeout).await
    }

    pub(super) async fn resume_within(
        &self,
        id: &str,
        timeout: Duration,
    ) -> Result<(), CoordinatorError> {
        let mut failures = Vec::new();
        for peer in self.peers.iter().rev() {
            let req = ResumeRequest {
                checkpoint: id.to_owned(),
                timeout_ms: self.timeout_ms(timeout),
            };
            if let Err(e) = Self::call(peer, "resume", timeout, peer.control.resume(req)).await {
                failures.push(e);
            }
        }
        if failures.is_empty() {
            Ok(())
        } else {
            Err(several("resume", id, failures))
        }
    }

    /// Resumes after a failure with a deadline of at least
    /// [`CLEANUP_TIMEOUT`]; a participant it cannot reach resumes on its
    /// lease.
    pub(super) async fn cleanup_resume(&self, id: &str) {
        let timeout = self.config.timeout.max(CLEANUP_TIMEOUT);
        let _reported_by_caller: Result<(), CoordinatorError> =
            self.resume_within(id, timeout).await;
    }
}
