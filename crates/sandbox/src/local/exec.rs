//! Exec and launch: the request, with the spec's environment beneath its own
//! and the spec's workdir when it names none, sent to the sandbox's anchor.

use std::collections::BTreeMap;
use std::time::Duration;

use rollpoint_proto::anchor::ANCHOR_SOCKET;
use rollpoint_proto::anchor::{
    AnchorRequest, ExecOutput, ExecRequest, LAUNCHES_DIR, LaunchRequest,
};

use super::{LocalBackend, REPLY_MARGIN};
use crate::{Error, LaunchHandle, SandboxInfo};

pub(super) fn exec(
    backend: &LocalBackend,
    id: &str,
    req: &ExecRequest,
) -> Result<ExecOutput, Error> {
    let info = backend.info(id)?;
    let (env, cwd) = in_sandbox(&info, &req.env, &req.cwd);
    let request = AnchorRequest::exec(ExecRequest {
        env,
        cwd,
        ..req.clone()
    });
    let timeout = Duration::from_millis(req.timeout_ms) + REPLY_MARGIN;
    let reply = backend.ask(id, &request, timeout)?;
    reply.exec.ok_or_else(|| Error::Anchor {
        sandbox: id.to_owned(),
        socket: info.control.join(ANCHOR_SOCKET),
        message: "exec reply without output".into(),
    })
}

pub(super) fn launch(
    backend: &LocalBackend,
    id: &str,
    req: &LaunchRequest,
) -> Result<LaunchHandle, Error> {
    let info = backend.info(id)?;
    let (env, cwd) = in_sandbox(&info, &req.env, &req.cwd);
    let request = AnchorRequest::launch(LaunchRequest {
        env,
        cwd,
        ..req.clone()
    });
    backend.ask(id, &request, REPLY_MARGIN)?;
    Ok(LaunchHandle {
        launch_id: req.launch_id.clone(),
        session: info.control.join(LAUNCHES_DIR).join(&req.launch_id),
    })
}

/// The environment and working directory a command runs with: the
/// sandbox's own environment under the request's, and the request's
/// directory or else the sandbox's workdir.
fn in_sandbox(
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
