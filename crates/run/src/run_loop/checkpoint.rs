//! A checkpoint of every rollout in flight, on the timer, on a signal or on request: the
//! run's definition first when it has a store, then the coordinator's checkpoint, bounded by
//! the grace period once a stop was asked for; its timings counted, logged and recorded.

use std::time::{Duration, Instant};

use rollpoint_api::ApiError;
use rollpoint_api::wire::CheckpointReply;
use rollpoint_checkpoint::Plan;
use rollpoint_proto::clock::unix_ms;
use rollpoint_proto::key::AttemptKey;

use super::grace::grace_over;
use super::new::Loop;
use crate::errors::RunError;
use crate::files::events::Event;
use crate::files::saved::retained_checkpoints;

/// A checkpoint the coordinator did not take (everyone was resumed).
#[derive(Debug)]
pub(crate) struct CheckpointFailed {
    id: String,
    error: rollpoint_checkpoint::CoordinatorError,
}

impl CheckpointFailed {
    pub(super) fn as_run_error(&self) -> RunError {
        RunError::checkpoint(self.id.clone(), self.error.to_string())
    }

    pub(super) fn api(&self) -> ApiError {
        ApiError::from(&self.error)
    }
}

impl From<CheckpointFailed> for RunError {
    fn from(e: CheckpointFailed) -> Self {
        e.as_run_error()
    }
}

impl Loop {
    pub(crate) fn scope(&self) -> Vec<AttemptKey> {
        self.in_flight.values().cloned().collect()
    }

    /// Takes a checkpoint of every in-flight rollout, holding them paused
    /// for `hold` after publishing; with `stop` it ends them (their
    /// sandboxes are freed once the checkpoint is durable).
    pub(crate) async fn checkpoint(
        &mut self,
        id: Option<String>,
        stop: bool,
        hold: Duration,
    ) -> Result<CheckpointReply, CheckpointFailed> {
        let id = id.unwrap_or_else(|| format!("ck-{}", unix_ms()));
        let started = Instant::now();
        let plan = Plan {
            id: id.clone(),
            scope: self.scope(),
            continues: self.continues.clone(),
            stop,
        };
        // With a store, the run's definition goes first, so the publish marker implies it.
        let checkpoint = async {
            if let Some(store) = &self.stack.remote {
                crate::files::definition::publish(store, &self.run_dir, &self.state, &id)
                    .await
                    .map_err(|source| rollpoint_checkpoint::CoordinatorError::Store {
                        checkpoint: id.clone(),
                        source,
                    })?;
            }
            self.stack.coordinator.checkpoint_held(&plan, hold).await
        };
        let taken = match &self.grace {
            None => checkpoint.await,
            Some((asked, grace)) => tokio::select! {
                taken = checkpoint => taken,
                () = grace_over(asked.clone(), *grace) => Err(rollpoint_checkpoint::CoordinatorError::NotPrepared {
                    checkpoint: id.clone(),
                    detail: format!("abandoned: the {:.1} s grace period after SIGTERM ran out", grace.as_secs_f64()),
                }),
            },
        };
        let done = match taken {
            Ok(done) => done,
            Err(error) => {
                self.metrics.failed();
                self.events.record(Event::CheckpointFailed {
                    id: id.clone(),
                    error: error.to_string(),
                });
                return Err(CheckpointFailed { id, error });
            }
        };
        let took = started.elapsed();
        if !done.pruned.is_empty() {
            self.sweep_snapshots();
        }
        let reply = done.reply(took);
        let t = &reply.timings;
        self.metrics.published(t);
        self.events.record(Event::Checkpoint {
            id: reply.id.clone(),
            scope: reply.scope.len(),
            restarts: reply.restarts.len(),
            timings: *t,
        });
        self.progress.checkpoints += 1;
        self.progress.last_checkpoint = Some((reply.id.clone(), took));
        tracing::info!(
            checkpoint = %reply.id,
            rollouts = reply.scope.len(),
            restarts = reply.restarts.len(),
            total_ms = t.total_ms,
            prepare_ms = t.prepare_ms,
            commit_ms = t.commit_ms,
            publish_ms = t.publish_ms,
            held_ms = t.held_ms,
            resume_ms = t.resume_ms,
            "checkpoint published"
        );
        self.reporter.update(&self.progress);
        Ok(reply)
    }

    /// Deletes snapshots no retained checkpoint names (retention pruned
    /// the checkpoints that named them).
    pub(crate) fn sweep_snapshots(&self) {
        let result = retained_checkpoints(&self.run_dir).and_then(|ids| {
            let keep: Vec<&str> = ids.iter().map(String::as_str).collect();
            self.stack
                .backend
                .sweep_snapshots(&keep)
                .map_err(|e| RunError::setup("sweep", e))
        });
        if let Err(e) = result {
            tracing::warn!(error = %e, "sweeping snapshots failed");
        }
    }
}
