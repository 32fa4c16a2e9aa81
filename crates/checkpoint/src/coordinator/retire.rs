//! Retire: attempts fenced out everywhere, callers (agents) before callees.

use std::time::Duration;

use super::Coordinator;
use crate::errors::CoordinatorError;
use crate::participant::AttemptKey;
use crate::wire::KeysVerb;

impl Coordinator {
    /// Retires attempt `keys` everywhere: callers (agents) before callees
    /// (model and resources).
    pub async fn retire(&self, keys: &[AttemptKey]) -> Result<(), CoordinatorError> {
        self.retire_within(keys, self.config.timeout).await
    }

    pub(super) async fn retire_within(
        &self,
        keys: &[AttemptKey],
        timeout: Duration,
    ) -> Result<(), CoordinatorError> {
        self.keys_call(keys, timeout, KeysVerb::Retire).await
    }
}
