//! Restore: read and verify this participant's share of a published
//! checkpoint, keep the records in scope, close admission and install them
//! as next attempts (or, for a fork, once per branch as new rollouts). Only from idle; the install runs to its end even past
//! the deadline (a resume waits for it), and a failed one reopens
//! admission.

use std::collections::BTreeSet;
use std::sync::Arc;

use super::{Inner, join_error, millis, within};
use crate::api::CallResult;
use crate::errors::{CallError, HookError};
use crate::participant::AttemptKey;
use crate::phase::{Phase, RestoreArgs, RestoreStep};
use crate::store;
use crate::wire::{Request as _, RestoreReply, RestoreRequest};

pub(super) async fn run(inner: Arc<Inner>, req: RestoreRequest) -> CallResult<RestoreReply> {
    req.check()?;
    let timeout = millis(req.timeout_ms);
    inner.renew(timeout);
    let ops = inner.ops.clone().lock_owned().await;
    let mut scope = req.scope.clone();
    scope.sort();
    scope.dedup();
    let args = RestoreArgs {
        source: req.source.clone(),
        scope,
        fork: req.fork.clone(),
        from_instance: req.from_instance.clone(),
    };
    if let RestoreStep::Replay(reply) = inner.machine().restore(&req.checkpoint, &args)? {
        return Ok(reply);
    }
    let work = {
        let inner = inner.clone();
        let id = req.checkpoint.clone();
        async move {
            let _ops = ops;
            let reply = install(&inner, &id, &args).await;
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

async fn install(inner: &Arc<Inner>, id: &str, args: &RestoreArgs) -> CallResult<RestoreReply> {
    let keep: BTreeSet<AttemptKey> = args.scope.iter().cloned().collect();
    // A moved restore reads the share a node that is gone wrote.
    let instance = args
        .from_instance
        .clone()
        .unwrap_or_else(|| inner.instance.clone());
    if let Some(remote) = &inner.config.remote {
        store::remote::fetch_share(
            remote,
            &inner.config.run_dir,
            &args.source,
            inner.kind,
            &instance,
        )
        .await?;
    }
    let (run_dir, kind, source) = (
        inner.config.run_dir.clone(),
        inner.kind,
        args.source.clone(),
    );
    let (_manifest, records) = tokio::task::spawn_blocking(move || {
        store::read(&run_dir, &source, kind, &instance, Some(&keep))
    })
    .await
    .map_err(|e| join_error("read", &e))??;
    let record_count = records.len() as u64;
    inner
        .participant
        .close_admission(id)
        .await
        .map_err(|e| CallError::hook("close admission", &e))?;
    let installed = match &args.fork {
        Some(fork) => {
            inner
                .participant
                .fork(id, records, &fork.from, &fork.to)
                .await
        }
        None => inner.participant.install(id, records, &args.scope).await,
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
            let _reopened: Result<(), HookError> = inner.participant.open_admission().await;
            Err(CallError::hook("install", &e))
        }
    }
}
