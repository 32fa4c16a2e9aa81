//! Exec and launch: the request, with the spec's environment beneath its own
//! and the spec's workdir when it names none, sent to the sandbox's anchor.
//! A command that failed while the kernel's OOM killer ended a process of
//! the sandbox gets a last stderr line naming the memory limit.

use std::collections::BTreeMap;
use std::time::Duration;

use rollpoint_proto::anchor::ANCHOR_SOCKET;
use rollpoint_proto::anchor::{
    AnchorRequest, ExecOutput, ExecRequest, LAUNCHES_DIR, LaunchRequest,
};

use super::backend::{LocalBackend, REPLY_MARGIN};
use crate::{LaunchHandle, SandboxInfo, errors::Error};

impl LocalBackend {
    pub(super) fn exec(&self, id: &str, req: &ExecRequest) -> Result<ExecOutput, Error> {
        let info = self.info(id)?;
        let (env, cwd) = in_sandbox(&info, &req.env, &req.cwd);
        let request = AnchorRequest::exec(ExecRequest {
            env,
            cwd,
            ..req.clone()
        });
        let timeout = Duration::from_millis(req.timeout_ms) + REPLY_MARGIN;
        let (reply, oom) = self.ask(id, &request, timeout)?;
        let mut out = reply.exec.ok_or_else(|| Error::Anchor {
            sandbox: id.to_owned(),
            socket: info.control.join(ANCHOR_SOCKET),
            message: "exec reply without output".into(),
        })?;
        if let Some(note) = oom
            && out.exit_code != Some(0)
        {
            note_oom(&mut out, &note);
        }
        Ok(out)
    }

    pub(super) fn launch(&self, id: &str, req: &LaunchRequest) -> Result<LaunchHandle, Error> {
        let info = self.info(id)?;
        let (env, cwd) = in_sandbox(&info, &req.env, &req.cwd);
        let request = AnchorRequest::launch(LaunchRequest {
            env,
            cwd,
            ..req.clone()
        });
        self.ask(id, &request, REPLY_MARGIN)?;
        Ok(LaunchHandle {
            launch_id: req.launch_id.clone(),
            session: info.control.join(LAUNCHES_DIR).join(&req.launch_id),
        })
    }
}

/// Adds the OOM note as the last line of the command's stderr (beyond its
/// output limit: it is the backend's line, not the command's).
fn note_oom(out: &mut ExecOutput, note: &str) {
    if !out.stderr.is_empty() && !out.stderr.ends_with('\n') {
        out.stderr.push('\n');
    }
    let who = match out.signal {
        Some(9) => "the command was",
        _ => "a process of the command's sandbox was",
    };
    out.stderr.push_str(&format!("rollpoint: {who} {note}\n"));
}

/// The environment and working directory a command runs with: the
/// sandbox's own environment under the request's, and the request's
/// directory or else the sandbox's workdir.
pub(super) fn in_sandbox(
    info: &SandboxInfo,
    env: &BTreeMap<String, String>,
    cwd: &str,
) -> (BTreeMap<String, String>, String) {
    let mut full = info.spec.full_env();
    full.extend(env.clone());
    let cwd = if cwd.is_empty() {
        info.spec.workdir.clone()
    } else {
        cwd.to_owned()
    };
    (full, cwd)
}
