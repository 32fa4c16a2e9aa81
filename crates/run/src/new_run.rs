//! `rollpoint run`: a new run of a tasks file in a run directory. The directory is locked,
//! the run's claim on its checkpoint store taken and its state written before anything
//! starts, so a run killed at any point after can be resumed; then the stack is built, the
//! control endpoint served, every task dispatched and the loop driven to the end.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::claim::lease::{self, Acquire};
use crate::claim::lock::RunLock;
use crate::config::RunConfig;
use crate::endpoint::start::{self as endpoint, Reach};
use crate::errors::RunError;
use crate::files::events::Event;
use crate::files::state::{RUN_STATE_VERSION, RunState, create_dir, trusted_rollouts};
use crate::files::tasks::TasksFile;
use crate::inputs::Inputs;
use crate::run_loop::drive::Ending;
use crate::run_loop::new::Loop;
use crate::stack::build::{Stack, open_backend};

/// `rollpoint run`: a new run of `tasks` in `run_dir`.
pub async fn run(
    run_dir: &Path,
    tasks: TasksFile,
    config: RunConfig,
    supervisor: PathBuf,
    env: BTreeMap<String, String>,
    inputs: Inputs,
) -> Result<Ending, RunError> {
    create_dir(run_dir)?;
    let run_dir = std::fs::canonicalize(run_dir).map_err(|e| RunError::io(run_dir, e))?;
    let _lock = RunLock::acquire(&run_dir)?;
    if RunState::path(&run_dir).exists() {
        return Err(RunError::state(
            RunState::path(&run_dir),
            "a run already lives here: continue it with `rollpoint resume`",
        ));
    }
    // The run's claim on its checkpoint store before anything is written: a store another
    // run holds is refused.
    let keeper = lease::hold(&config, &run_dir, Acquire::Start, &inputs.loop_tx).await?;
    // The state first, so a run killed while its stack starts can be resumed; its gateway
    // port (0: not chosen yet) is settled once the gateway listens, before any launch.
    let mut state = RunState {
        v: RUN_STATE_VERSION,
        tasks_path: tasks.path.clone(),
        tasks_sha256: tasks.sha256.clone(),
        config: config.clone(),
        gateway_port: config.gateway_port,
        attempts: tasks
            .tasks
            .iter()
            .map(|t| (t.rollout().to_owned(), 0))
            .collect(),
        forks: std::collections::BTreeMap::new(),
        saved_by: std::collections::BTreeMap::new(),
        branched: std::collections::BTreeSet::new(),
        trusted: trusted_rollouts(&tasks.tasks),
        infra_retries: BTreeMap::new(),
    };
    state.save(&run_dir)?;
    let backend = open_backend(&run_dir, &config, supervisor)?;
    let stack = Stack::build(
        &run_dir,
        &config,
        backend,
        &inputs.program,
        config.gateway_port,
    )
    .await?;
    if state.gateway_port != stack.gateway_port {
        state.gateway_port = stack.gateway_port;
        state.save(&run_dir)?;
    }
    let serving = match inputs.listen {
        Some(listen) => Some(endpoint::start(&run_dir, listen, Reach::of(&stack)).await?),
        None => None,
    };
    let mut lp = Loop::new(run_dir, stack, state, tasks.tasks.len(), 0, None, env)?;
    lp.events.record(Event::Started {
        tasks: tasks.tasks.len(),
    });
    for task in tasks.tasks {
        let key = task.group.as_deref().unwrap_or(task.rollout()).to_owned();
        match tasks.failed.get(&key) {
            Some((class, error)) => lp.ended_before_start(&task, *class, error)?,
            None => lp.register(task).await?,
        }
    }
    let ending = lp
        .drive(inputs.signals, inputs.grace, inputs.stop_requested)
        .await;
    drop(serving);
    if let Some(keeper) = keeper {
        keeper.release().await;
    }
    ending
}
