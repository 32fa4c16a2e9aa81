//! Closing a session: its sandbox destroyed, its records dropped.

use super::LocalOwner;
use crate::owner::OwnerResult;

impl LocalOwner {
    pub(super) async fn close_impl(&self, session: &str) -> OwnerResult<()> {
        let (sandbox, _) = self.current(session)?;
        self.destroy(session, &sandbox.id).await?;
        let mut sessions = self.sessions();
        if sessions
            .get(session)
            .is_some_and(|s| s.sandbox.id == sandbox.id)
        {
            sessions.remove(session);
        }
        Ok(())
    }
}
