//! Fork: one saved attempt installed once per branch everywhere, as a
//! restore.

use super::{Coordinator, Restored};
use crate::errors::CoordinatorError;
use crate::participant::AttemptKey;
use crate::wire::ForkSpec;

impl Coordinator {
    /// Forks attempt `from` of published checkpoint `source` into the branches `to` (see
    /// [`ForkSpec`]) everywhere at once, as restore `id`: each participant installs `from`'s
    /// records once per branch. All or nothing, as [`Coordinator::restore`]; on success the
    /// caller dispatches the branches' next attempts, then resumes `id`.
    #[tracing::instrument(name = "fork", skip_all, fields(fork = %id, checkpoint = %source, from = %from, branches = to.len()))]
    pub async fn fork(
        &self,
        id: &str,
        source: &str,
        from: &AttemptKey,
        to: &[AttemptKey],
    ) -> Result<Restored, CoordinatorError> {
        let fork = ForkSpec {
            from: from.clone(),
            to: to.to_vec(),
        };
        fork.check().map_err(|e| CoordinatorError::Fork {
            checkpoint: source.to_owned(),
            source: e,
        })?;
        self.restore_or_fork(id, source, std::slice::from_ref(from), Some(fork), &[])
            .await
    }
}
