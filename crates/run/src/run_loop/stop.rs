//! Stopping the run: the stop checkpoint (everything it could not save torn down), or on
//! SIGTERM with a grace period, that checkpoint only if it fits what is left of it.

use std::time::{Duration, Instant};

use rollpoint_api::wire::CheckpointReply;

use super::checkpoint::CheckpointFailed;
use super::drive::Ending;
use super::grace::teardown_margin;
use super::new::Loop;
use crate::errors::RunError;
use crate::files::events::Event;

impl Loop {
    /// SIGTERM: the stop checkpoint, but with `grace` only if the last checkpoint's time says
    /// it fits what is left of it, and abandoned (not published: the publish point is its
    /// last step) when it does not finish in time. Either way the run ends (exit 75).
    pub(super) async fn stop_within(
        mut self,
        received: Instant,
        grace: Option<Duration>,
    ) -> Result<Ending, RunError> {
        let Some(grace) = grace else {
            let id = self.stop(None).await?.id;
            self.stack.shutdown().await;
            return Ok(Ending::Stopped { checkpoint: id });
        };
        let left = grace
            .saturating_sub(received.elapsed())
            .saturating_sub(teardown_margin(grace));
        let estimate = self
            .progress
            .last_checkpoint
            .as_ref()
            .map(|(_, took)| took.mul_f64(1.5));
        let why = match estimate {
            Some(need) if need > left => Some(format!(
                "the stop checkpoint would take about {:.1} s (1.5 x the last one), more than the {:.1} s left of the {:.1} s grace period",
                need.as_secs_f64(),
                left.as_secs_f64(),
                grace.as_secs_f64()
            )),
            _ => match tokio::time::timeout(left, self.stop(None)).await {
                Ok(Ok(done)) => {
                    self.stack.shutdown().await;
                    return Ok(Ending::Stopped {
                        checkpoint: done.id,
                    });
                }
                Ok(Err(e)) => Some(format!("the stop checkpoint failed: {}", e.as_run_error())),
                Err(_) => Some(format!(
                    "the stop checkpoint did not finish within the {:.1} s grace period and was abandoned",
                    grace.as_secs_f64()
                )),
            },
        };
        let why = why.unwrap_or_default();
        let latest = rollpoint_checkpoint::store::latest(&self.run_dir)
            .ok()
            .flatten();
        tracing::warn!(
            why = %why,
            latest = latest.as_deref().unwrap_or("none"),
            "stopping without a stop checkpoint; a resume continues from the newest published one"
        );
        self.events.record(Event::Stopped {
            checkpoint: latest.clone().unwrap_or_default(),
        });
        if let Err(e) = self.stack.backend.destroy_all() {
            tracing::warn!(error = %e, "tearing down sandboxes failed");
        }
        self.reporter.finish(&self.progress);
        self.stack.shutdown().await;
        Ok(Ending::StoppedWithout { latest, why })
    }

    /// A checkpoint that stops the run: everything it could not save is
    /// torn down too.
    pub(crate) async fn stop(
        &mut self,
        id: Option<String>,
    ) -> Result<CheckpointReply, CheckpointFailed> {
        let reply = self.checkpoint(id, true, Duration::ZERO).await?;
        self.events.record(Event::Stopped {
            checkpoint: reply.id.clone(),
        });
        if let Err(e) = self.stack.backend.destroy_all() {
            tracing::warn!(error = %e, "tearing down sandboxes failed");
        }
        self.reporter.finish(&self.progress);
        Ok(reply)
    }
}
