//! Dispatching rollouts: a task as attempt 0, a retired rollout over from its seed as its
//! next attempt, a task the infrastructure failed before it ran as its row; each attempt
//! watched until its result comes back to the loop.

use rollpoint_driver::{Bookmark, InfraClass, RolloutResult, RolloutTask, RunHandle};
use rollpoint_proto::clock::unix_ms;
use rollpoint_proto::key::AttemptKey;

use super::new::Loop;
use crate::errors::RunError;

impl Loop {
    pub(crate) fn watch(&mut self, handle: RunHandle, attempt: u32) -> Result<(), RunError> {
        let key = AttemptKey::of(&handle.rollout, attempt)
            .map_err(|e| RunError::rollout(handle.rollout.clone(), e))?;
        self.in_flight.insert(handle.rollout.clone(), key);
        let tx = self.tx.clone();
        tokio::spawn(async move {
            let rollout = handle.rollout.clone();
            let result = handle.result().await;
            let _closed_on_exit = tx.send((rollout, attempt, result));
        });
        Ok(())
    }

    pub(crate) async fn register_key(&self, rollout: &str, attempt: u32) -> Result<(), RunError> {
        if let Some(g) = &self.stack.gateway {
            let key = AttemptKey::of(rollout, attempt)
                .map_err(|e| RunError::rollout(rollout.to_owned(), e))?;
            g.register(&key).await?;
        }
        Ok(())
    }

    /// Dispatches a task as attempt 0.
    pub(crate) async fn register(&mut self, task: RolloutTask) -> Result<(), RunError> {
        let task = task
            .with_env(&self.env)
            .with_limits(&self.state.config.sandbox_limits);
        let rollout = task.rollout().to_owned();
        self.register_key(&rollout, 0).await?;
        if self.state.config.retry_infra > 0 {
            self.tasks.insert(rollout.clone(), task.clone());
        }
        let handle = self
            .stack
            .runs
            .register(task)
            .map_err(|e| RunError::rollout(rollout.clone(), e))?;
        self.watch(handle, 0)
    }

    /// Writes the row of a task the infrastructure failed before it could
    /// run (its environment did not build): no sandbox, no reward.
    pub(crate) fn ended_before_start(
        &mut self,
        task: &RolloutTask,
        class: InfraClass,
        error: &str,
    ) -> Result<(), RunError> {
        let now = unix_ms();
        let mut row = RolloutResult::infra_error(
            &task.task.id,
            task.rollout(),
            0,
            class,
            error.to_owned(),
            rollpoint_driver::Timings {
                started_at_ms: now,
                ended_at_ms: now,
                ..Default::default()
            },
        );
        row.group.clone_from(&task.group);
        tracing::warn!(rollout = %row.rollout, class = class.as_str(), error, "the rollout cannot run");
        self.results.append(&row)?;
        self.metrics.result(&row);
        self.progress.done += 1;
        Ok(())
    }

    /// Starts a retired rollout over from its seed as attempt `last + 1`.
    pub(crate) async fn start_over(
        &mut self,
        task: RolloutTask,
        last: u32,
    ) -> Result<(), RunError> {
        let task = task.with_env(&self.env);
        let rollout = task.rollout().to_owned();
        let next = last.saturating_add(1);
        self.register_key(&rollout, next).await?;
        self.state.attempts.insert(rollout.clone(), next);
        self.state.save(&self.run_dir)?;
        if self.state.config.retry_infra > 0 {
            self.tasks.insert(rollout.clone(), task.clone());
        }
        let mark = Bookmark::seed(&rollout, last, unix_ms());
        let handle = self
            .stack
            .runs
            .install(vec![(task, mark)])
            .map_err(|e| RunError::rollout(rollout.clone(), e))?
            .pop()
            .ok_or_else(|| RunError::rollout(rollout.clone(), "the drivers started nothing"))?;
        self.watch(handle, next)
    }
}
