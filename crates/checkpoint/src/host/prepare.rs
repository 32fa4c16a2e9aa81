//! Prepare: close admission (once per checkpoint), then wait for readiness
//! until the deadline. Not ready in time is an answer, not an error: the
//! reply says `preparing` with the blockers, and admission stays closed
//! until the controller resumes (or the lease runs out).

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::Inner;
use super::call::{millis, within};
use crate::api::CallResult;
use crate::errors::{CallError, HookError};
use crate::phase::{Phase, PrepareStep};
use crate::wire::{PrepareReply, PrepareRequest, Request as _};

/// Readiness is re-checked at least this often, whatever `changed` does.
const RECHECK: Duration = Duration::from_secs(1);

impl Inner {
    /// The receiver is shared with the lease watcher a first prepare starts.
    pub(super) async fn prepare(self: Arc<Self>, req: PrepareRequest) -> CallResult<PrepareReply> {
        req.check()?;
        let timeout = millis(req.timeout_ms);
        let deadline = Instant::now() + timeout;
        let id = req.checkpoint.as_str();
        self.renew(timeout);
        let seen;
        {
            let _ops = self.ops.lock().await;
            let step = self.machine().prepare(id)?;
            seen = self.abort_generation();
            match step {
                PrepareStep::Replay(reply) => return Ok(reply),
                PrepareStep::Wait => {}
                PrepareStep::Close => {
                    let epoch = self.machine().epoch();
                    self.start_lease(epoch, timeout);
                    let closed = within("prepare", &format!("checkpoint {}", id), timeout, async {
                        self.participant
                            .close_admission(id)
                            .await
                            .map_err(|e| CallError::hook("close admission", &e))
                    })
                    .await;
                    if let Err(e) = closed {
                        // Never half closed: reopen, and the checkpoint never
                        // started here.
                        let _reopened: Result<(), HookError> =
                            self.participant.open_admission().await;
                        self.machine().prepare_failed(id);
                        return Err(e);
                    }
                }
            }
        }
        loop {
            if self.machine().active() != Some(id) {
                return Err(CallError::stale(id));
            }
            let readiness = self.participant.readiness().await.capped();
            if readiness.ready {
                let reply = PrepareReply {
                    checkpoint: id.to_owned(),
                    phase: Phase::Prepared,
                    readiness,
                };
                let mut m = self.machine();
                if m.prepared(reply.clone()) {
                    return Ok(reply);
                }
                // Resumed meanwhile, or a concurrent prepare got there first.
                return match m.prepare(id)? {
                    PrepareStep::Replay(reply) => Ok(reply),
                    PrepareStep::Close | PrepareStep::Wait => Err(CallError::stale(id)),
                };
            }
            if Instant::now() >= deadline {
                return Ok(PrepareReply {
                    checkpoint: id.to_owned(),
                    phase: Phase::Preparing,
                    readiness,
                });
            }
            tokio::select! {
                () = self.participant.changed() => {}
                () = tokio::time::sleep(RECHECK) => {}
                () = tokio::time::sleep_until(deadline) => {}
                () = self.aborted(seen) => return Err(CallError::stale(id)),
            }
        }
    }
}
