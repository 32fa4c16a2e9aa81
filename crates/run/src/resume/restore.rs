//! Restoring the attempts the plan keeps from the source checkpoint, each as its next
//! attempt, recorded in `run.json` before they go on.

use rollpoint_proto::clock::unix_ms;

use super::plan::ResumePlan;
use crate::errors::RunError;
use crate::files::state::RunState;
use crate::run_loop::new::Loop;

/// Restores `plan.restore` from checkpoint `source` into `lp`, the attempts recorded in
/// `state`; nothing without a source or anything to restore.
pub(super) async fn restore(
    lp: &mut Loop,
    state: &mut RunState,
    source: Option<&str>,
    plan: &ResumePlan,
) -> Result<(), RunError> {
    let Some(source) = source else {
        return Ok(());
    };
    if plan.restore.is_empty() {
        return Ok(());
    }
    let id = format!("restore-{}", unix_ms());
    let restored = lp
        .stack
        .coordinator
        .restore(&id, source, &plan.restore)
        .await
        .map_err(|e| RunError::checkpoint(source.to_owned(), e))?;
    drop(restored);
    for handle in lp.stack.agent.take_installed() {
        let rollout = handle.rollout.clone();
        let attempt = plan
            .restore
            .iter()
            .find(|k| k.rollout().as_str() == rollout)
            .map_or(0, |k| k.attempt().saturating_add(1));
        state.attempts.insert(rollout.clone(), attempt);
        lp.watch(handle, attempt)?;
    }
    lp.state = state.clone();
    lp.state.save(&lp.run_dir)?;
    lp.stack
        .coordinator
        .resume(&id)
        .await
        .map_err(|e| RunError::checkpoint(id.clone(), e))?;
    tracing::info!(
        checkpoint = %source,
        rollouts = lp.in_flight.len(),
        "restored rollouts from a checkpoint"
    );
    Ok(())
}
