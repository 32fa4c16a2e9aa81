//! Harbor task directories as rollout tasks.
//!
//! A Harbor dataset (Terminal-Bench 2 and the others Harbor, verifiers and
//! NeMo Gym read) is a directory of task directories, each with a
//! `task.toml`, an `instruction.md`, an environment (`docker_image`, or
//! `environment/Dockerfile`), `tests/test.sh` writing
//! `/logs/verifier/reward.txt` or `reward.json`, and `solution/solve.sh`.
//! [`prepare`] reads one, builds its Dockerfiles with buildah into the image
//! cache, and gives the rollout tasks `rollpoint run` runs: the instruction
//! is the harness's prompt, `tests/` goes in only when grading starts, and
//! the reward is read from the files the verifier wrote. The mapping, field
//! by field, is docs/design/harbor.md.

mod build;
mod config;
mod errors;
mod map;
mod task_dir;

use std::io::Write as _;
use std::path::Path;
use std::time::Duration;

use rollpoint_driver::RolloutTask;
use serde_json::json;

pub use build::{Builder, Built, context_key};
pub use config::{NetworkPolicy, TaskConfig};
pub use errors::HarborError;
pub use map::{Agent, SOLUTION_DIR, Settings, TESTS_DIR, rollout_task};
pub use task_dir::{Environment, HarborTask, rollout_id, task_dirs};

/// What [`prepare`] did besides the tasks.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Prepared {
    pub tasks: Vec<RolloutTask>,
    /// Tasks refused (with `skip_refused`), with the reason.
    pub refused: Vec<(String, String)>,
    /// Keys of `task.toml` files the schema does not have, by task.
    pub unknown: Vec<(String, Vec<String>)>,
    /// Tasks whose environment did not build: rollout id, class
    /// (`build_failed` or `timeout_infra`) and what happened. Their tasks
    /// are in `tasks` too; they end as rows without running.
    pub failed: Vec<(String, rollpoint_driver::InfraClass, String)>,
    /// Environments built now, and found built.
    pub built: usize,
    pub reused: usize,
}

/// Reads the Harbor dataset (or single task) at `source`, builds what its
/// tasks need, and maps each task with `settings`. A refused task stops
/// everything unless `skip_refused`, which lists it and goes on.
pub fn prepare(
    source: &Path,
    settings: &Settings,
    builder: &Builder,
    skip_refused: bool,
) -> Result<Prepared, HarborError> {
    let mut out = Prepared::default();
    let mut ids = std::collections::BTreeSet::new();
    let mut read = Vec::new();
    // Every task is read (and any refused) before anything is built.
    for dir in task_dirs(source)? {
        let task = match HarborTask::read(&dir) {
            Ok(t) => t,
            Err(HarborError::Refused { task, reason }) if skip_refused => {
                tracing::warn!(task = %task, reason = %reason, "task refused; it does not run");
                out.refused.push((task, reason));
                continue;
            }
            Err(e) => return Err(e),
        };
        if !ids.insert(task.id.clone()) {
            return Err(HarborError::Field {
                path: dir,
                field: "task".to_owned(),
                message: format!("its id {:?} is another directory's too", task.id),
            });
        }
        if matches!(settings.agent, Agent::Oracle) && !task.solution.contains_key("solve.sh") {
            let reason = "the oracle agent needs solution/solve.sh".to_owned();
            if !skip_refused {
                return Err(HarborError::Refused {
                    task: task.id,
                    reason,
                });
            }
            out.refused.push((task.id, reason));
            continue;
        }
        if !task.config.unknown.is_empty() {
            tracing::warn!(task = %task.id, keys = ?task.config.unknown, "task.toml keys the schema does not have; not used");
            out.unknown
                .push((task.id.clone(), task.config.unknown.clone()));
        }
        read.push(task);
    }
    for task in &read {
        let base = match &task.environment {
            Environment::Image(reference) => json!({"kind": "image", "ref": reference}),
            Environment::Dockerfile { context } => {
                #[expect(
                    clippy::cast_possible_truncation,
                    clippy::cast_sign_loss,
                    reason = "checked (0, 30 days] when read"
                )]
                let timeout = Duration::from_secs(task.config.build_timeout_s.ceil() as u64);
                match builder.build(&task.id, context, timeout) {
                    Ok(built) => {
                        if built.reused {
                            out.reused += 1;
                        } else {
                            out.built += 1;
                        }
                        json!({"kind": "oci-archive", "path": built.archive})
                    }
                    Err(e @ (HarborError::Build { .. } | HarborError::BuildTimeout { .. })) => {
                        let class = if matches!(e, HarborError::BuildTimeout { .. }) {
                            rollpoint_driver::InfraClass::TimeoutInfra
                        } else {
                            rollpoint_driver::InfraClass::BuildFailed
                        };
                        tracing::warn!(task = %task.id, error = %e, "the environment did not build; the task's rollouts end as infra_error");
                        out.failed.push((task.id.clone(), class, e.to_string()));
                        json!({"kind": "oci-archive", "path": builder.archive_path(context)?})
                    }
                    Err(e) => return Err(e),
                }
            }
        };
        out.tasks.push(rollout_task(task, settings, base)?);
    }
    if out.tasks.is_empty() {
        return Err(HarborError::Empty {
            path: source.to_owned(),
        });
    }
    Ok(out)
}

/// Writes `tasks` as a tasks file (one task per line), atomically, mode 0600.
pub fn write_tasks(path: &Path, tasks: &[RolloutTask]) -> Result<(), HarborError> {
    let mut text = Vec::new();
    for t in tasks {
        serde_json::to_writer(&mut text, t).map_err(|e| HarborError::io(path, e.into()))?;
        text.write_all(b"\n")
            .map_err(|e| HarborError::io(path, e))?;
    }
    build::write_file(path, &text)
}
