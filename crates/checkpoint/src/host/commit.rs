//! Commit: check readiness again (it can regress), refuse a scope naming an
//! attempt this participant must restart, export the scope's records and
//! write them durably, then (with `stop`) free what was exported. The work
//! holds the transition lock until it ends; a resume aborts it, and a call
//! that outlives its deadline fails while nothing is published.

use std::collections::BTreeSet;
use std::sync::Arc;

use super::Inner;
use super::call::{join_error, millis, within};
use crate::api::CallResult;
use crate::errors::{CallError, Code};
use crate::participant::AttemptKey;
use crate::phase::{CommitArgs, CommitStep, Phase};
use crate::store;
use crate::wire::{CommitReply, CommitRequest, Request as _};

impl Inner {
    /// The export runs as a task of its own past a missed deadline, so the
    /// receiver is shared with it.
    pub(super) async fn commit(self: Arc<Self>, req: CommitRequest) -> CallResult<CommitReply> {
        req.check()?;
        let timeout = millis(req.timeout_ms);
        self.renew(timeout);
        let seen = self.abort_generation();
        let ops = self.ops.clone().lock_owned().await;
        let mut scope = req.scope.clone();
        scope.sort();
        scope.dedup();
        let args = CommitArgs {
            scope,
            stop: req.stop,
        };
        if let CommitStep::Replay(reply) = self.machine().commit(&req.checkpoint, &args)? {
            return Ok(reply);
        }
        let id = req.checkpoint.clone();
        let work = {
            let inner = self.clone();
            let args = args.clone();
            async move {
                let _ops = ops;
                let reply = tokio::select! {
                    reply = inner.export_and_write(&id, &args) => reply?,
                    () = inner.aborted(seen) => return Err(CallError::stale(&id)),
                };
                inner.machine().committed(args, reply.clone());
                Ok(reply)
            }
        };
        // The work runs on as a task past a missed deadline, holding the lock,
        // so a retry or resume finds it finished rather than half done.
        let task = tokio::spawn(work);
        within(
            "commit",
            &format!("checkpoint {}", &req.checkpoint),
            timeout,
            async { task.await.map_err(|e| join_error("commit", &e))? },
        )
        .await
    }

    async fn export_and_write(&self, id: &str, args: &CommitArgs) -> CallResult<CommitReply> {
        let readiness = self.participant.readiness().await.capped();
        if !readiness.ready {
            return Err(CallError::new(
                Code::InvalidPhase,
                format!(
                    "commit of checkpoint {id}: no longer ready ({} blockers: {})",
                    readiness.blocker_count,
                    readiness.blockers.join(", ")
                ),
            ));
        }
        let restarts: BTreeSet<&AttemptKey> = readiness.restarts.iter().collect();
        if let Some(key) = args.scope.iter().find(|k| restarts.contains(k)) {
            return Err(CallError::new(
                Code::RestartInScope,
                format!(
                    "commit of checkpoint {id}: scope names {key}, which this participant must restart"
                ),
            ));
        }
        let records = self
            .participant
            .export(id, &args.scope)
            .await
            .map_err(|e| CallError::hook("export", &e))?;
        let (run_dir, kind, instance) = (
            self.config.run_dir.clone(),
            self.kind,
            self.instance.clone(),
        );
        let (cid, scope) = (id.to_owned(), args.scope.clone());
        let manifest = tokio::task::spawn_blocking(move || {
            store::write(&run_dir, &cid, kind, &instance, &scope, &records)
        })
        .await
        .map_err(|e| join_error("write", &e))??;
        if let Some(remote) = &self.config.remote {
            store::remote::upload_share(remote, &self.config.run_dir, &manifest).await?;
        }
        let park_error = if args.stop {
            self.participant
                .park_exported()
                .await
                .err()
                .map(|e| e.message)
        } else {
            None
        };
        Ok(CommitReply {
            checkpoint: id.to_owned(),
            phase: Phase::Committed,
            manifest,
            park_error,
        })
    }
}
