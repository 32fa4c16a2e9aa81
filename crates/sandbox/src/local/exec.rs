//! Exec and launch: the request, with the spec's environment beneath its own
//! and the spec's workdir when it names none, sent to the sandbox's anchor.

use std::time::Duration;

use rollpoint_proto::anchor::ANCHOR_SOCKET;
use rollpoint_proto::anchor::{
    AnchorRequest, ExecOutput, ExecRequest, LAUNCHES_DIR, LaunchRequest,
};

use super::{LocalBackend, REPLY_MARGIN};
use crate::{Error, LaunchHandle};

pub(super) fn exec(
    backend: &LocalBackend,
    id: &str,
    req: &ExecRequest,
) -> Result<ExecOutput, Error> {
    let info = backend.info(id)?;
    let mut env = info.spec.full_env();
    env.extend(req.env.clone());
    let cwd = if req.cwd.is_empty() {
        info.spec.workdir.clone()
    } else {
        req.cwd.clone()
    };
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
    let mut env = info.spec.full_env();
    env.extend(req.env.clone());
    let cwd = if req.cwd.is_empty() {
        info.spec.workdir.clone()
    } else {
        req.cwd.clone()
    };
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
