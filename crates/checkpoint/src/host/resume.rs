//! Resume, which is also abort: stop any wait or export of the checkpoint,
//! open admission (held replies delivered, parked work continues) and
//! remember the id so a late call for it is refused. Resuming an id that
//! never reached this participant remembers it too.

use std::time::Duration;

use super::Inner;
use super::call::{millis, within};
use crate::api::CallResult;
use crate::errors::CallError;
use crate::phase::{Phase, ResumeStep};
use crate::wire::{Request as _, ResumeReply, ResumeRequest};

impl Inner {
    /// Ends checkpoint `req.checkpoint` within the call's deadline.
    pub(super) async fn resume(&self, req: ResumeRequest) -> CallResult<ResumeReply> {
        req.check()?;
        let timeout = millis(req.timeout_ms);
        self.renew(timeout);
        within(
            "resume",
            &format!("checkpoint {}", &req.checkpoint),
            timeout,
            self.abort(&req.checkpoint, timeout),
        )
        .await
    }

    /// Ends checkpoint `id`: the resume route and the lease watcher.
    pub(super) async fn abort(&self, id: &str, timeout: Duration) -> CallResult<ResumeReply> {
        let reply = |idempotent| ResumeReply {
            checkpoint: id.to_owned(),
            phase: Phase::Idle,
            idempotent,
        };
        // Refuse a conflicting or repeated resume before disturbing anything.
        if self.machine().was_resumed(id) {
            return Ok(reply(true));
        }
        let active = self.machine().active().map(str::to_owned);
        match active.as_deref() {
            Some(a) if a != id => return self.machine().resume(id).map(|_| reply(false)),
            // Stop a wait or an export of this checkpoint before queueing for
            // the lock it may hold.
            Some(_) => self.aborts.send_modify(|g| *g += 1),
            // Nothing open: still queue, so a restore in progress ends first.
            None => {}
        }
        let _ops = self.ops.lock().await;
        let step = self.machine().resume(id)?;
        match step {
            ResumeStep::AlreadyResumed | ResumeStep::Remembered => return Ok(reply(true)),
            ResumeStep::Open => {}
        }
        within("resume", &format!("checkpoint {}", id), timeout, async {
            self.participant
                .open_admission()
                .await
                .map_err(|e| CallError::hook("open admission", &e))
        })
        .await?;
        self.machine().resumed(id);
        *self.lease() = None;
        // Wake any wait that started after the first signal.
        self.aborts.send_modify(|g| *g += 1);
        Ok(reply(false))
    }
}
