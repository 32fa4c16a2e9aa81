//! `rollpoint resume`: after any crash, sweep what the crashed process left,
//! decide per task what to do ([`crate::plan`]), restore the latest
//! checkpoint's attempts as their next attempts, start the rest over, and
//! drive the loop to the end.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rollpoint_checkpoint::store;
use rollpoint_driver::RolloutTask;
use rollpoint_proto::key::RolloutId;

use crate::controller::{Ending, Inputs, Loop, now_ms};
use crate::endpoint;
use crate::errors::RunError;
use crate::plan::{drop_unsaved_sessions, plan_resume};
use crate::results::read_results;
use crate::saved::{retained_checkpoints, saved_sessions};
use crate::stack::{Stack, open_backend};
use crate::state::RunState;
use crate::tasks::load_tasks;

/// `rollpoint resume`: continues the run in `run_dir`.
pub async fn resume(
    run_dir: &Path,
    supervisor: Option<PathBuf>,
    env: BTreeMap<String, String>,
    inputs: Inputs,
) -> Result<Ending, RunError> {
    let run_dir = std::fs::canonicalize(run_dir).map_err(|e| RunError::io(run_dir, e))?;
    let mut state = RunState::load(&run_dir)?;
    let tasks = load_tasks(&state.tasks_path)?;
    if tasks.sha256 != state.tasks_sha256 {
        return Err(RunError::State {
            path: tasks.path,
            message: format!(
                "the tasks file changed since the run started (sha256 {}, was {})",
                tasks.sha256, state.tasks_sha256
            ),
        });
    }
    let supervisor = supervisor
        .or_else(|| state.config.supervisor.clone())
        .ok_or_else(|| RunError::setup("supervisor", "no supervisor binary given"))?;
    let backend = open_backend(&run_dir, &state.config, supervisor)?;
    let swept = backend
        .sweep_orphans()
        .map_err(|e| RunError::setup("sweep", e))?;
    if !swept.is_empty() {
        eprintln!(
            "rollpoint: swept {} sandboxes of the crashed run",
            swept.len()
        );
    }
    let retained: Vec<String> = retained_checkpoints(&run_dir)?;
    let keep: Vec<&str> = retained.iter().map(String::as_str).collect();
    backend
        .sweep_snapshots(&keep)
        .map_err(|e| RunError::setup("sweep", e))?;

    let finished: std::collections::BTreeSet<String> = read_results(&run_dir)?
        .into_iter()
        .map(|r| r.rollout)
        .collect();
    let latest = store::latest(&run_dir).map_err(|e| RunError::Checkpoint {
        checkpoint: "LATEST".to_owned(),
        message: e.to_string(),
    })?;
    let doc = match &latest {
        Some(id) => {
            Some(
                store::read_checkpoint(&run_dir, id).map_err(|e| RunError::Checkpoint {
                    checkpoint: id.clone(),
                    message: e.to_string(),
                })?,
            )
        }
        None => None,
    };
    let order: Vec<RolloutId> = tasks
        .tasks
        .iter()
        .map(|t| {
            RolloutId::new(t.rollout()).map_err(|e| RunError::Task {
                path: tasks.path.clone(),
                line: 0,
                field: "task.id".to_owned(),
                message: e.to_string(),
            })
        })
        .collect::<Result<_, _>>()?;
    let mut plan = plan_resume(
        &order,
        &finished,
        &state.attempts,
        doc.as_ref().map(|d| d.scope.as_slice()),
    );
    if let Some(source) = &latest
        && !plan.restore.is_empty()
    {
        let (sessions, saved) = saved_sessions(&run_dir, source)?;
        for k in drop_unsaved_sessions(&mut plan, &sessions, &saved) {
            eprintln!(
                "rollpoint: {k}: checkpoint {source} holds no sandbox for its session; it starts over"
            );
        }
    }
    let by_id: BTreeMap<String, RolloutTask> = tasks
        .tasks
        .into_iter()
        .map(|t| (t.rollout().to_owned(), t))
        .collect();

    let stack = Stack::build(&run_dir, &state.config, backend, state.gateway_port).await?;
    let mut lp = Loop::new(
        run_dir.clone(),
        stack,
        state.clone(),
        order.len(),
        finished.len(),
        latest.clone(),
        env,
    )?;

    if let (Some(source), false) = (&latest, plan.restore.is_empty()) {
        let id = format!("restore-{}", now_ms());
        let restored = lp
            .stack
            .coordinator
            .restore(&id, source, &plan.restore)
            .await
            .map_err(|e| RunError::Checkpoint {
                checkpoint: source.clone(),
                message: e.to_string(),
            })?;
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
        lp.state.save(&run_dir)?;
        lp.stack
            .coordinator
            .resume(&id)
            .await
            .map_err(|e| RunError::Checkpoint {
                checkpoint: id.clone(),
                message: e.to_string(),
            })?;
        lp.reporter.line(&format!(
            "restored {} rollouts from checkpoint {source}",
            lp.in_flight.len()
        ));
    }
    if !plan.retire.is_empty() {
        lp.stack
            .coordinator
            .retire(&plan.retire)
            .await
            .map_err(|e| RunError::setup("retire", e))?;
        for k in &plan.retire {
            let Some(task) = by_id.get(k.rollout().as_str()) else {
                continue;
            };
            lp.start_over(task.clone(), k.attempt())?;
        }
        lp.reporter.line(&format!(
            "{} rollouts start over as their next attempt",
            plan.retire.len()
        ));
    }
    for rollout in &plan.fresh {
        if let Some(task) = by_id.get(rollout.as_str()) {
            lp.register(task.clone())?;
        }
    }
    // Pin the new attempts at once, so a crash now resumes them, not the
    // attempts this resume replaced.
    if !lp.in_flight.is_empty() {
        lp.checkpoint(None, false, Duration::ZERO).await?;
    }
    let serving = match inputs.listen {
        Some(listen) => Some(endpoint::start(&lp.run_dir, listen).await?),
        None => None,
    };
    let ending = lp.drive(inputs.signals).await;
    drop(serving);
    ending
}
