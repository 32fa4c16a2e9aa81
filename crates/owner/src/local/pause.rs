//! Pausing and continuing the launches of many sessions as one step (a
//! checkpoint's prepare): each session's current sandbox, then one backend
//! batch for all.

use rollpoint_proto::receipt::{Op, Outcome, Receipt};
use rollpoint_sandbox::LaunchRef;

use super::LocalOwner;
use crate::errors::OwnerError;
use crate::owner::{OwnerResult, SessionLaunch};

impl LocalOwner {
    /// Each launch's sandbox, `None` for a session not open here.
    fn launch_refs(&self, launches: &[SessionLaunch]) -> Vec<Option<LaunchRef>> {
        let sessions = self.sessions();
        launches
            .iter()
            .map(|l| {
                sessions.get(&l.session).map(|s| LaunchRef {
                    sandbox: s.sandbox.id.clone(),
                    launch_id: l.launch_id.clone(),
                })
            })
            .collect()
    }

    async fn batch<T: Send + 'static>(
        &self,
        call: &'static str,
        refs: Vec<LaunchRef>,
        f: impl FnOnce(
            &dyn rollpoint_sandbox::Backend,
            &[LaunchRef],
        ) -> Result<T, rollpoint_sandbox::Error>
        + Send
        + 'static,
    ) -> OwnerResult<T> {
        let backend = std::sync::Arc::clone(&self.backend);
        tokio::task::spawn_blocking(move || f(backend.as_ref(), &refs))
            .await
            .map_err(|source| OwnerError::Join {
                session: format!("a batch of {call}"),
                call,
                source,
            })?
            .map_err(|source| OwnerError::Batch {
                call,
                source: Box::new(source),
            })
    }

    pub(super) async fn pause_launches_impl(
        &self,
        launches: &[SessionLaunch],
    ) -> OwnerResult<Vec<Option<Receipt>>> {
        let found = self.launch_refs(launches);
        let refs: Vec<LaunchRef> = found.iter().flatten().cloned().collect();
        let mut receipts = self
            .batch("pause_launches", refs, |b, r| b.pause_launches(r))
            .await?
            .into_iter();
        Ok(found
            .iter()
            .map(|f| f.as_ref().and_then(|_| receipts.next().flatten()))
            .collect())
    }

    pub(super) async fn continue_launches_impl(
        &self,
        launches: &[SessionLaunch],
    ) -> OwnerResult<Vec<Receipt>> {
        let found = self.launch_refs(launches);
        let refs: Vec<LaunchRef> = found.iter().flatten().cloned().collect();
        let mut receipts = self
            .batch("continue_launches", refs, |b, r| b.continue_launches(r))
            .await?
            .into_iter();
        Ok(found
            .iter()
            .zip(launches)
            .map(|(f, l)| {
                f.as_ref().and_then(|_| receipts.next()).unwrap_or_else(|| {
                    // Its session is closed: nothing of it is paused.
                    Receipt::no_action(Op::Continue, &l.launch_id, Outcome::AlreadyEnded, None)
                })
            })
            .collect())
    }
}
