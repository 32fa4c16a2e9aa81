//! Restore: read and verify this participant's share of a published
//! checkpoint, keep the records in scope, close admission and install them
//! as next attempts (or, for a fork, once per branch as new rollouts). Only from idle; the install runs to its end even past
//! the deadline (a resume waits for it), and a failed one reopens
//! admission.

use std::collections::BTreeSet;
use std::sync::Arc;

use super::Inner;
use super::call::{join_error, millis, within};
use crate::api::CallResult;
use crate::errors::{CallError, HookError};
use crate::participant::AttemptKey;
use crate::phase::{Phase, RestoreArgs, RestoreStep};
use crate::store;
use crate::wire::{Request as _, RestoreReply, RestoreRequest};

impl Inner {
    /// The install runs as a task of its own past a missed deadline, so the
    /// receiver is shared with it.
    pub(super) async fn restore(self: Arc<Self>, req: RestoreRequest) -> CallResult<RestoreReply> {
        req.check()?;
        let timeout = millis(req.timeout_ms);
        self.renew(timeout);
        let ops = self.ops.clone().lock_owned().await;
        let mut scope = req.scope.clone();
        scope.sort();
        scope.dedup();
        let args = RestoreArgs {
            source: req.source.clone(),
            scope,
            fork: req.fork.clone(),
            from_instance: req.from_instance.clone(),
        };
        if let RestoreStep::Replay(reply) = self.machine().restore(&req.checkpoint, &args)? {
            return Ok(reply);
        }
        let work = {
            let inner = self.clone();
            let id = req.checkpoint.clone();
            async move {
                let _ops = ops;
                let reply = inner.install(&id, &args).await;
                match reply {
                    Ok(reply) => {
                        let recorded = {
                            let mut m = inner.machine();
                            m.restored(args, reply.clone()).then(|| m.epoch())
                        };
                        if let Some(epoch) = recorded {
                            inner.start_lease(epoch, timeout);
                            return Ok(reply);
                        }
                        // Resumed while installing: undo, as a failed restore.
                        let _retired = inner.participant.retire(&reply.restored).await;
                        let _reopened = inner.participant.open_admission().await;
                        Err(CallError::stale(&id))
                    }
                    Err(e) => Err(e),
                }
            }
        };
        let task = tokio::spawn(work);
        within(
            "restore",
            &format!("checkpoint {}", &req.checkpoint),
            timeout,
            async { task.await.map_err(|e| join_error("restore", &e))? },
        )
        .await
    }

    async fn install(&self, id: &str, args: &RestoreArgs) -> CallResult<RestoreReply> {
        let keep: BTreeSet<AttemptKey> = args.scope.iter().cloned().collect();
        // A moved restore reads the share a node that is gone wrote.
        let instance = args
            .from_instance
            .clone()
            .unwrap_or_else(|| self.instance.clone());
        if let Some(remote) = &self.config.remote {
            store::remote::fetch_share(
                remote,
                &self.config.run_dir,
                &args.source,
                self.kind,
                &instance,
            )
            .await?;
        }
        let (run_dir, kind, source) = (self.config.run_dir.clone(), self.kind, args.source.clone());
        let (_manifest, records) = tokio::task::spawn_blocking(move || {
            store::read(&run_dir, &source, kind, &instance, Some(&keep))
        })
        .await
        .map_err(|e| join_error("read", &e))??;
        let record_count = records.len() as u64;
        self.participant
            .close_admission(id)
            .await
            .map_err(|e| CallError::hook("close admission", &e))?;
        let installed = match &args.fork {
            Some(fork) => {
                self.participant
                    .fork(id, records, &fork.from, &fork.to)
                    .await
            }
            None => self.participant.install(id, records, &args.scope).await,
        };
        match installed {
            Ok(restored) => Ok(RestoreReply {
                checkpoint: id.to_owned(),
                source: args.source.clone(),
                phase: Phase::Restored,
                restored,
                record_count,
            }),
            Err(e) => {
                let _reopened: Result<(), HookError> = self.participant.open_admission().await;
                Err(CallError::hook("install", &e))
            }
        }
    }
}
