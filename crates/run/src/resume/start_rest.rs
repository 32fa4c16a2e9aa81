//! Starting the rest: the retired rollouts over as their next attempt (a branch its
//! checkpoint does not hold yet forked again from its source while that is retained), the
//! rollouts never dispatched at attempt 0; the resume recorded, and every new attempt pinned
//! by a checkpoint at once.

use std::time::Duration;

use rollpoint_checkpoint::store;

use super::plan::ResumePlan;
use super::read::OnDisk;
use crate::errors::RunError;
use crate::files::events::Event;
use crate::run_loop::new::Loop;

/// Starts what `plan` does not restore, in `lp`, for the run `disk` read; `source` is the
/// checkpoint restored from.
pub(super) async fn start_rest(
    lp: &mut Loop,
    disk: &OnDisk,
    plan: &ResumePlan,
    source: Option<String>,
) -> Result<(), RunError> {
    if !plan.retire.is_empty() {
        lp.stack
            .coordinator
            .retire(&plan.retire)
            .await
            .map_err(|e| RunError::setup("retire", e))?;
        for k in &plan.retire {
            let Some(task) = disk.by_id.get(k.rollout().as_str()) else {
                continue;
            };
            // A branch its checkpoint does not hold yet is forked again from its source,
            // while that is retained, as the attempt after the one that ran.
            let refork = disk
                .state
                .forks
                .get(k.rollout().as_str())
                .filter(|f| store::read_checkpoint(&disk.run_dir, &f.checkpoint).is_ok());
            match refork {
                Some(f) => {
                    lp.fork_into(
                        &f.checkpoint,
                        &f.from,
                        std::slice::from_ref(k),
                        task,
                        f.call.clone(),
                    )
                    .await?;
                }
                None => lp.start_over(task.clone(), k.attempt()).await?,
            }
        }
        tracing::info!(
            rollouts = plan.retire.len(),
            "rollouts start over as their next attempt"
        );
    }
    for rollout in &plan.fresh {
        if let Some(task) = disk.by_id.get(rollout.as_str()) {
            lp.register(task.clone()).await?;
        }
    }
    lp.events.record(Event::Resumed {
        from: source,
        restored: lp
            .in_flight
            .len()
            .saturating_sub(plan.retire.len() + plan.fresh.len()),
        started_over: plan.retire.len(),
        finished: disk.finished.len(),
    });
    // Pin the new attempts at once, so a crash now resumes them, not the
    // attempts this resume replaced.
    if !lp.in_flight.is_empty() {
        lp.checkpoint(None, false, Duration::ZERO).await?;
    }
    Ok(())
}
