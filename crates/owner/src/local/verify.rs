//! Grading a session: the task's verify command in the sandbox, the reward read from it.

use rollpoint_proto::anchor::ExecRequest;

use super::{LocalOwner, OUTPUT_LIMIT};
use crate::owner::OwnerResult;
use crate::verdict::{Verdict, grade};

impl LocalOwner {
    pub(super) async fn verify_impl(&self, session: &str) -> OwnerResult<Verdict> {
        let (sandbox, task) = self.current(session)?;
        let req = ExecRequest {
            argv: task.verify.command.clone(),
            env: Default::default(),
            cwd: sandbox.spec.workdir.clone(),
            timeout_ms: task.verify.timeout_s.saturating_mul(1000),
            output_limit: OUTPUT_LIMIT,
            stdin: None,
        };
        let id = sandbox.id.clone();
        let out = self
            .on_backend(session, &sandbox.id, "verify", move |b| b.exec(&id, &req))
            .await?;
        let mut verdict = grade(task.verify.reward, &out);
        // The graded session is over: forget it and destroy its sandbox,
        // unless a restore has replaced the sandbox meanwhile.
        let ended = {
            let mut sessions = self.sessions();
            if sessions
                .get(session)
                .is_some_and(|s| s.sandbox.id == sandbox.id)
            {
                sessions.remove(session);
                true
            } else {
                false
            }
        };
        if ended && let Err(e) = self.destroy(session, &sandbox.id).await {
            verdict.cleanup_error = Some(e.to_string());
        }
        Ok(verdict)
    }
}
