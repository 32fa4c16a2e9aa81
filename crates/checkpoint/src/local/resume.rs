//! Resume, which is also abort: stop any wait or export of the checkpoint,
//! open admission (held replies delivered, parked work continues) and
//! remember the id so a late call for it is refused. Resuming an id that
//! never reached this participant remembers it too.

use std::sync::Arc;
use std::time::Duration;

use super::{Inner, millis, within};
use crate::control::ControlResult;
use crate::errors::ControlError;
use crate::phase::{Phase, ResumeStep};
use crate::wire::{Request as _, ResumeReply, ResumeRequest};

pub(super) async fn run(inner: Arc<Inner>, req: ResumeRequest) -> ControlResult<ResumeReply> {
    req.check()?;
    let timeout = millis(req.timeout_ms);
    inner.renew(timeout);
    within(
        "resume",
        &format!("checkpoint {}", &req.checkpoint),
        timeout,
        abort(&inner, &req.checkpoint, timeout),
    )
    .await
}

/// Ends checkpoint `id`: the resume route and the lease watcher.
pub(super) async fn abort(
    inner: &Inner,
    id: &str,
    timeout: Duration,
) -> ControlResult<ResumeReply> {
    let reply = |idempotent| ResumeReply {
        checkpoint: id.to_owned(),
        phase: Phase::Idle,
        idempotent,
    };
    // Refuse a conflicting or repeated resume before disturbing anything.
    if inner.machine().was_resumed(id) {
        return Ok(reply(true));
    }
    let active = inner.machine().active().map(str::to_owned);
    if active.is_some_and(|a| a != id) {
        return inner.machine().resume(id).map(|_| reply(false));
    }
    inner.aborts.send_modify(|g| *g += 1);
    let _ops = inner.ops.lock().await;
    match inner.machine().resume(id)? {
        ResumeStep::AlreadyResumed => return Ok(reply(true)),
        ResumeStep::Remembered => return Ok(reply(true)),
        ResumeStep::Open => {}
    }
    within("resume", &format!("checkpoint {}", id), timeout, async {
        inner
            .participant
            .open_admission()
            .await
            .map_err(|e| ControlError::hook("open admission", &e))
    })
    .await?;
    inner.machine().resumed(id);
    *inner.lease() = None;
    Ok(reply(false))
}
