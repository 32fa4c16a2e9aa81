//! Running a command, or launching a harness under the supervisor, in a session's sandbox.

use rollpoint_proto::anchor::{ExecOutput, ExecRequest, LaunchRequest};

use super::LocalOwner;
use crate::errors::OwnerError;
use crate::owner::{Launched, OwnerResult};
use crate::task::{check_id, resolve};

impl LocalOwner {
    pub(super) async fn exec_impl(
        &self,
        session: &str,
        mut req: ExecRequest,
    ) -> OwnerResult<ExecOutput> {
        let (sandbox, _) = self.current(session)?;
        if req.argv.first().is_none_or(String::is_empty) {
            return Err(OwnerError::bad("argv", "argv is empty"));
        }
        for (field, value, max) in [
            (
                "timeout_ms",
                req.timeout_ms,
                rollpoint_proto::limits::MAX_COMMAND_TIMEOUT_MS,
            ),
            (
                "output_limit",
                req.output_limit,
                rollpoint_proto::limits::MAX_OUTPUT_LIMIT,
            ),
        ] {
            if value > max {
                return Err(OwnerError::bad(field, format!("{value} is over {max}")));
            }
        }
        req.cwd = resolve(&sandbox.spec.workdir, &req.cwd);
        let id = sandbox.id.clone();
        self.on_backend(session, &sandbox.id, "exec", move |b| b.exec(&id, &req))
            .await
    }

    pub(super) async fn launch_impl(
        &self,
        session: &str,
        mut req: LaunchRequest,
    ) -> OwnerResult<Launched> {
        let (sandbox, _) = self.current(session)?;
        check_id(
            "launch_id",
            &req.launch_id,
            rollpoint_proto::anchor::LAUNCH_ID_MAX,
        )?;
        if req.argv.first().is_none_or(String::is_empty) {
            return Err(OwnerError::bad("argv", "argv is empty"));
        }
        req.cwd = resolve(&sandbox.spec.workdir, &req.cwd);
        let id = sandbox.id.clone();
        let handle = self
            .on_backend(session, &sandbox.id, "launch", move |b| b.launch(&id, &req))
            .await?;
        Ok(Launched {
            launch_id: handle.launch_id,
            session_dir: handle.session,
        })
    }
}
