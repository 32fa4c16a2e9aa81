//! A whole checkpoint: prepare, commit, publish, prune, resume; on a failure
//! before the publish point everyone is resumed and nothing is published.

use std::time::{Duration, Instant};

use super::Coordinator;
use crate::errors::CoordinatorError;
use crate::participant::AttemptKey;
use crate::store::{self, CheckpointDoc};

/// What to checkpoint.
#[derive(Debug, Clone, Default)]
pub struct Plan {
    pub id: String,
    /// The attempt keys in flight (and restored, not yet re-dispatched).
    pub scope: Vec<AttemptKey>,
    /// The checkpoint this run was restored from.
    pub continues: Option<String>,
    /// End the run: park what was exported and do not resume.
    pub stop: bool,
}

/// How long each step of a checkpoint took.
#[derive(Debug, Clone, Copy, Default)]
pub struct Timings {
    pub prepare: Duration,
    pub commit: Duration,
    pub publish: Duration,
    /// The hold: kept paused on purpose after publishing ([`Coordinator::checkpoint_held`]).
    pub held: Duration,
    pub resume: Duration,
}

/// A published checkpoint.
#[derive(Debug, Clone)]
pub struct Checkpointed {
    pub doc: CheckpointDoc,
    pub timings: Timings,
    /// Older checkpoints deleted by retention.
    pub pruned: Vec<String>,
}

impl Coordinator {
    /// Takes checkpoint `plan.id`: prepare, commit the scope minus the
    /// attempts some participant must restart, publish, prune, and resume
    /// (unless `plan.stop`). On any failure before publishing, everyone is
    /// resumed and nothing is published; a failure to resume after
    /// publishing is [`CoordinatorError::PublishedNotResumed`].
    pub async fn checkpoint(&self, plan: &Plan) -> Result<Checkpointed, CoordinatorError> {
        self.checkpoint_held(plan, Duration::ZERO).await
    }

    /// [`Coordinator::checkpoint`] with a hold: everyone kept paused for `hold`
    /// after the checkpoint is published and before resuming, so a frozen
    /// rollout can be inspected (the wire's `hold_ms`). `hold` must stay well
    /// under the participants' lease, or they resume on their own.
    #[tracing::instrument(name = "checkpoint", skip_all, fields(checkpoint = %plan.id, scope = plan.scope.len()))]
    pub async fn checkpoint_held(
        &self,
        plan: &Plan,
        hold: Duration,
    ) -> Result<Checkpointed, CoordinatorError> {
        let id = plan.id.as_str();
        let mut timings = Timings::default();
        let started = Instant::now();
        let prepared = match self.prepare(id).await {
            Ok(p) if p.ready => p,
            Ok(p) => {
                self.cleanup_resume(id).await;
                return Err(CoordinatorError::NotPrepared {
                    checkpoint: id.to_owned(),
                    detail: p.blockers(),
                });
            }
            Err(e) => {
                self.cleanup_resume(id).await;
                return Err(e);
            }
        };
        timings.prepare = started.elapsed();

        let scope: Vec<AttemptKey> = plan
            .scope
            .iter()
            .filter(|k| !prepared.restarts.contains(*k))
            .cloned()
            .collect();
        let started = Instant::now();
        let members = match self.commit(id, &scope, plan.stop).await {
            Ok(m) => m,
            Err(e) => {
                self.cleanup_resume(id).await;
                return Err(e);
            }
        };
        timings.commit = started.elapsed();

        let started = Instant::now();
        let doc = CheckpointDoc {
            version: store::CHECKPOINT_VERSION,
            id: id.to_owned(),
            created_unix_ms: rollpoint_proto::clock::unix_ms(),
            continues: plan.continues.clone(),
            scope,
            restarts: prepared.restarts.into_iter().collect(),
            participants: members,
        };
        let pruned = match self.publish(&doc).await {
            Ok(pruned) => pruned,
            Err(source) => {
                self.cleanup_resume(id).await;
                return Err(CoordinatorError::Store {
                    checkpoint: id.to_owned(),
                    source,
                });
            }
        };
        timings.publish = started.elapsed();

        if !plan.stop {
            if !hold.is_zero() {
                tokio::time::sleep(hold).await;
                timings.held = hold;
            }
            let started = Instant::now();
            self.resume(id)
                .await
                .map_err(|e| CoordinatorError::PublishedNotResumed {
                    checkpoint: id.to_owned(),
                    source: Box::new(e),
                })?;
            timings.resume = started.elapsed();
        }
        Ok(Checkpointed {
            doc,
            timings,
            pruned,
        })
    }
}
