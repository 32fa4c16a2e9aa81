//! A rollout's attempt came back: its result row written, or, for an infrastructure error
//! `retry_infra` still covers, the rollout started over in a fresh sandbox; an attempt that
//! ended without a result is run again by a resume.

use rollpoint_driver::{DriverError, InfraClass, RolloutResult};
use rollpoint_proto::key::AttemptKey;

use super::new::Loop;
use crate::errors::RunError;
use crate::files::events::Event;

impl Loop {
    pub(crate) async fn finished(
        &mut self,
        rollout: String,
        attempt: u32,
        result: Result<RolloutResult, DriverError>,
    ) -> Result<(), RunError> {
        if self.in_flight.get(&rollout).map(AttemptKey::attempt) != Some(attempt) {
            return Ok(());
        }
        let Some(k) = self.in_flight.remove(&rollout) else {
            return Ok(());
        };
        match result {
            Ok(result) if self.retries_infra(&result) => {
                let class = result.infra_class.unwrap_or(InfraClass::Unclassified);
                let error = result.error.clone().unwrap_or_default();
                tracing::warn!(
                    rollout = %rollout,
                    attempt,
                    class = class.as_str(),
                    error = %error,
                    "the infrastructure ended the attempt; it starts again in a fresh sandbox"
                );
                self.events.record(Event::InfraRetry {
                    rollout: rollout.clone(),
                    attempt,
                    class,
                    error,
                });
                self.state
                    .infra_retries
                    .entry(rollout.clone())
                    .or_default()
                    .push(class);
                if let Err(e) = self
                    .stack
                    .coordinator
                    .forget(std::slice::from_ref(&k))
                    .await
                {
                    tracing::warn!(key = %k, error = %e, "forgetting a retried attempt failed");
                }
                let task = self.tasks.get(&rollout).cloned().ok_or_else(|| {
                    RunError::rollout(rollout.clone(), "its task is not known for a retry")
                })?;
                self.start_over(task, attempt).await?;
            }
            Ok(mut result) => {
                if let Some(history) = self.state.infra_retries.get(&rollout) {
                    result.infra_retries.clone_from(history);
                }
                if let Some(f) = self.state.forks.get(&rollout) {
                    result.forked_from = Some(rollpoint_driver::ForkedFrom {
                        rollout: f.from.rollout().as_str().to_owned(),
                        checkpoint: f.checkpoint.clone(),
                        call: f.call.clone(),
                    });
                }
                self.results.append(&result)?;
                self.metrics.result(&result);
                self.progress.done += 1;
                self.progress.in_flight = self.in_flight.len();
                tracing::info!(
                    rollout = %rollout,
                    attempt = result.attempt,
                    status = result.status.as_str(),
                    reward = result.reward,
                    "rollout finished"
                );
                self.reporter.update(&self.progress);
                if let Err(e) = self
                    .stack
                    .coordinator
                    .forget(std::slice::from_ref(&k))
                    .await
                {
                    tracing::warn!(key = %k, error = %e, "forgetting a finished attempt failed");
                }
            }
            Err(e) => {
                tracing::error!(
                    rollout = %rollout,
                    error = %e,
                    "the rollout ended without a result; a resume runs it again"
                );
                self.lost.push(rollout);
            }
        }
        Ok(())
    }

    /// Whether `result` is an infrastructure error `retry_infra` still
    /// covers (forks are not retried: their saved state is gone with them).
    fn retries_infra(&self, result: &RolloutResult) -> bool {
        result.status == rollpoint_driver::Status::InfraError
            && self.tasks.contains_key(&result.rollout)
            && !self.state.forks.contains_key(&result.rollout)
            && self
                .state
                .infra_retries
                .get(&result.rollout)
                .map_or(0, Vec::len)
                < self.state.config.retry_infra as usize
    }
}
