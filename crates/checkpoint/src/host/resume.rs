//! Resume, which is also abort: stop any wait or export of the checkpoint,
//! open admission (held replies delivered, parked work continues) and
//! remember the id so a late call for it is refused. Resuming an id that
//! never reached this participant remembers it too.

use std::sync::Arc;
use std::time::Duration;

use super::{Inner, millis, within};
use crate::api::CallResult;
use crate::errors::CallError;
use crate::phase::{Phase, ResumeStep};
use crate::wire::{Request as _, ResumeReply, ResumeRequest};

pub(super) async fn run(inner: Arc<Inner>, req: ResumeRequest) -> CallResult<ResumeReply> {
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
pub(super) async fn abort(inner: &Inner, id: &str, timeout: Duration) -> CallResult<ResumeReply> {
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
    match active.as_deref() {
        Some(a) if a != id => return inner.machine().resume(id).map(|_| reply(false)),
        // Stop a wait or an export of this checkpoint before queueing for
        // the lock it may hold.
        Some(_) => inner.aborts.send_modify(|g| *g += 1),
        // Nothing open: still queue, so a restore in progress ends first.
        None => {}
    }
    let _ops = inner.ops.lock().await;
    let step = inner.machine().resume(id)?;
    match step {
        ResumeStep::AlreadyResumed | ResumeStep::Remembered => return Ok(reply(true)),
        ResumeStep::Open => {}
    }
    within("resume", &format!("checkpoint {}", id), timeout, async {
        inner
            .participant
            .open_admission()
            .await
            .map_err(|e| CallError::hook("open admission", &e))
    })
    .await?;
    inner.machine().resumed(id);
    *inner.lease() = None;
    // Wake any wait that started after the first signal.
    inner.aborts.send_modify(|g| *g += 1);
    Ok(reply(false))
}
