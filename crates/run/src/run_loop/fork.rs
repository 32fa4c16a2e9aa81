//! Forking a checkpointed rollout N ways inside a run: `n` new rollouts `<rollout>~<i>`, each
//! made from what checkpoint C saved of the rollout (its sandbox forked from the snapshot, its
//! bookmark and harness session, its ledger prefix). Each branch then runs as a rollout of
//! the run: a slot, checkpoints, crash and resume, its own result row with `forked_from`.
//! The source is not disturbed.
//!
//! The branches are pinned by a checkpoint at once. A crash before that checkpoint is
//! published leaves branches the latest checkpoint does not hold: a resume forks them again
//! from C (as a later attempt, so nothing their first execution recorded is dropped) while C
//! is retained, and starts them over from their seed otherwise.

use rollpoint_api::wire::{ForkReply, ForkRequest, WIRE_VERSION};
use rollpoint_checkpoint::store;
use rollpoint_driver::RolloutTask;
use rollpoint_proto::key::{AttemptKey, RolloutId};

use crate::errors::RunError;
use crate::files::events::Event;
use crate::files::state::ForkRecord;
use crate::run_loop::new::Loop;
use rollpoint_proto::clock::unix_ms;

/// What a fork of `req` would make, checked against the run before anything changes: the
/// checkpoint's document, the attempt it saved and the branches' keys (the lowest free
/// `<rollout>~<i>`).
pub(crate) fn plan(
    run_dir: &std::path::Path,
    dispatched: &std::collections::BTreeMap<String, u32>,
    req: &ForkRequest,
) -> Result<(store::CheckpointDoc, AttemptKey, Vec<AttemptKey>), RunError> {
    let checkpoint = req.checkpoint.as_str();
    let err = |message: String| RunError::checkpoint(checkpoint.to_owned(), message);
    let doc =
        store::read_checkpoint(run_dir, checkpoint).map_err(|source| RunError::NoCheckpoint {
            checkpoint: checkpoint.to_owned(),
            source,
        })?;
    let rollout = RolloutId::new(&req.rollout).map_err(|e| err(e.to_string()))?;
    let from = doc
        .forkable(&rollout)
        .map_err(|source| RunError::Unforkable {
            checkpoint: checkpoint.to_owned(),
            source,
        })?;
    let to = rollout
        .free_branches(req.n as usize, |b| dispatched.contains_key(b.as_str()))
        .map_err(|e| err(e.to_string()))?
        .into_iter()
        .map(|b| AttemptKey::new(b, from.attempt()))
        .collect();
    Ok((doc, from, to))
}

impl Loop {
    /// Forks `req.rollout` of checkpoint `req.checkpoint` into `req.n` new rollouts, and pins
    /// them with a checkpoint.
    pub(crate) async fn fork(&mut self, req: &ForkRequest) -> Result<ForkReply, RunError> {
        let made = self.fork_unpinned(req).await?;
        self.pin_branches().await;
        Ok(made)
    }

    /// Pins new branches, so a crash from now on resumes them from their own checkpoint.
    async fn pin_branches(&mut self) {
        if let Err(e) = self
            .checkpoint(None, false, std::time::Duration::ZERO)
            .await
        {
            tracing::warn!(error = %RunError::from(e), "the checkpoint pinning the branches failed; the run goes on");
        }
    }

    /// `[branch]`: after checkpoint `checkpoint` (of `scope`, `restarts` not saved), forks each
    /// rollout of the tasks file it is due for, then pins the branches with one checkpoint.
    pub(crate) async fn branch_by_rule(
        &mut self,
        checkpoint: &str,
        scope: &[AttemptKey],
        restarts: &[AttemptKey],
    ) {
        let Some(rule) = self.state.config.branch.clone() else {
            return;
        };
        let Ok(nth) = rule.nth() else { return };
        let mut due = Vec::new();
        for k in scope {
            let r = k.rollout().as_str();
            if self.state.forks.contains_key(r)
                || self.state.branched.contains(r)
                || restarts.contains(k)
            {
                continue;
            }
            let n = self.state.saved_by.entry(r.to_owned()).or_insert(0);
            *n += 1;
            if *n >= nth {
                due.push(r.to_owned());
            }
        }
        let mut forked = false;
        for rollout in due {
            let req = ForkRequest {
                v: WIRE_VERSION,
                checkpoint: checkpoint.to_owned(),
                rollout: rollout.clone(),
                n: rule.n,
            };
            match self.fork_unpinned(&req).await {
                Ok(_) => {
                    self.state.saved_by.remove(&rollout);
                    self.state.branched.insert(rollout);
                    forked = true;
                }
                Err(e) => tracing::warn!(
                    rollout = %rollout,
                    error = %e,
                    "the branch rule could not fork the rollout; the run goes on"
                ),
            }
        }
        if let Err(e) = self.state.save(&self.run_dir) {
            tracing::warn!(error = %e, "the branch rule's counts were not saved");
        }
        if forked {
            self.pin_branches().await;
        }
    }

    /// [`Loop::fork`] without the pinning checkpoint.
    async fn fork_unpinned(&mut self, req: &ForkRequest) -> Result<ForkReply, RunError> {
        let checkpoint = req.checkpoint.as_str();
        let (doc, from, to) = plan(&self.run_dir, &self.state.attempts, req)?;
        let rollout = from.rollout().clone();
        let (task, call) = crate::files::saved::fork_source(&self.run_dir, &doc, &from)?;
        self.fork_into(checkpoint, &from, &to, &task, call).await?;
        self.progress.total += to.len();
        Ok(ForkReply {
            v: WIRE_VERSION,
            checkpoint: checkpoint.to_owned(),
            rollout: rollout.as_str().to_owned(),
            from,
            branches: to.iter().map(|k| k.rollout().as_str().to_owned()).collect(),
        })
    }

    /// Installs `from` of `checkpoint` as the branches `to` everywhere, records them in
    /// `run.json`, and lets them run.
    pub(crate) async fn fork_into(
        &mut self,
        checkpoint: &str,
        from: &AttemptKey,
        to: &[AttemptKey],
        task: &RolloutTask,
        call: Option<String>,
    ) -> Result<(), RunError> {
        let id = format!("fork-{}", unix_ms());
        let err = |message: String| RunError::checkpoint(checkpoint.to_owned(), message);
        if let Err(e) = self.stack.coordinator.fork(&id, checkpoint, from, to).await {
            // The coordinator retired whatever was installed: drop those runs' handles.
            drop(self.stack.agent.take_installed());
            return Err(err(e.to_string()));
        }
        for handle in self.stack.agent.take_installed() {
            let rollout = handle.rollout.clone();
            let Some(k) = to.iter().find(|k| k.rollout().as_str() == rollout) else {
                continue;
            };
            let attempt = k.attempt().saturating_add(1);
            self.state.attempts.insert(rollout.clone(), attempt);
            let mut branch_task = task.clone();
            branch_task.id = Some(rollout.clone());
            self.state.forks.insert(
                rollout.clone(),
                ForkRecord {
                    task: branch_task,
                    from: from.clone(),
                    checkpoint: checkpoint.to_owned(),
                    call: call.clone(),
                },
            );
            self.watch(handle, attempt)?;
        }
        self.state.save(&self.run_dir)?;
        self.stack
            .coordinator
            .resume(&id)
            .await
            .map_err(|e| err(e.to_string()))?;
        let branches: Vec<String> = to.iter().map(|k| k.rollout().as_str().to_owned()).collect();
        tracing::info!(
            checkpoint = %checkpoint,
            from = %from,
            branches = %branches.join(", "),
            "forked a rollout"
        );
        self.events.record(Event::Forked {
            checkpoint: checkpoint.to_owned(),
            from: from.clone(),
            branches,
        });
        Ok(())
    }
}
