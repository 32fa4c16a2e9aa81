//! Forget: rollouts dropped everywhere, callers first.

use super::Coordinator;
use crate::errors::CoordinatorError;
use crate::participant::AttemptKey;
use crate::wire::KeysVerb;

impl Coordinator {
    /// Forgets the rollouts of `keys` everywhere, callers first.
    pub async fn forget(&self, keys: &[AttemptKey]) -> Result<(), CoordinatorError> {
        self.keys_call(keys, self.config.timeout, KeysVerb::Forget)
            .await
    }
}
