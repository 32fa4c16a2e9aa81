//! The first step of a resume: the run directory locked, and what it holds read and checked
//! before anything is swept or restored: the state, the tasks file (refused if it changed),
//! the rollouts in order, the forks asked for, the rollouts already finished.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use rollpoint_api::wire::ForkRequest;
use rollpoint_driver::RolloutTask;
use rollpoint_proto::key::RolloutId;

use crate::claim::lock::RunLock;
use crate::errors::RunError;
use crate::files::results::read_results;
use crate::files::state::{RunState, trusted_rollouts};
use crate::files::tasks::load_tasks;

/// What a resume found in the run directory, checked.
#[derive(Debug)]
pub(super) struct OnDisk {
    /// The run directory, canonical.
    pub(super) run_dir: PathBuf,
    /// Held until the resume ends: one process drives a run at a time.
    pub(super) _lock: RunLock,
    pub(super) state: RunState,
    /// Rollout ids in the tasks file's order, the branches of forks after them.
    pub(super) order: Vec<RolloutId>,
    /// Each rollout's task by id, the branches' from `run.json`.
    pub(super) by_id: BTreeMap<String, RolloutTask>,
    /// Rollouts with a result row.
    pub(super) finished: BTreeSet<String>,
}

/// Locks `run_dir` and reads it; each fork of `forks` is checked against the run.
pub(super) fn read(run_dir: &Path, forks: &[ForkRequest]) -> Result<OnDisk, RunError> {
    let run_dir = std::fs::canonicalize(run_dir).map_err(|e| RunError::io(run_dir, e))?;
    let lock = RunLock::acquire(&run_dir)?;
    let state = RunState::load(&run_dir)?;
    let tasks = load_tasks(&state.tasks_path)?.with_samples(state.config.samples)?;
    // Said again at every resume: the log of this process must say it too.
    let _ = trusted_rollouts(&tasks.tasks);
    if tasks.sha256 != state.tasks_sha256 {
        return Err(RunError::state(
            tasks.path,
            format!(
                "the tasks file changed since the run started (sha256 {}, was {})",
                tasks.sha256, state.tasks_sha256
            ),
        ));
    }
    // Read (and refuse) before anything is swept or restored. Branches of forks follow the
    // tasks of the file.
    let mut order: Vec<RolloutId> = tasks
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
    for branch in state.forks.keys() {
        order.push(RolloutId::new(branch).map_err(|e| {
            RunError::state(RunState::path(&run_dir), format!("forks.{branch}: {e}"))
        })?);
    }
    for (i, req) in forks.iter().enumerate() {
        req.check()
            .map_err(|e| RunError::setup("fork", format!("fork {i}: {e}")))?;
        crate::run_loop::fork::plan(&run_dir, &state.attempts, req)?;
    }
    let finished: BTreeSet<String> = read_results(&run_dir)?
        .into_iter()
        .map(|r| r.rollout)
        .collect();
    let mut by_id: BTreeMap<String, RolloutTask> = tasks
        .tasks
        .into_iter()
        .map(|t| (t.rollout().to_owned(), t))
        .collect();
    for (branch, f) in &state.forks {
        by_id.insert(branch.clone(), f.task.clone());
    }
    Ok(OnDisk {
        run_dir,
        _lock: lock,
        state,
        order,
        by_id,
        finished,
    })
}
