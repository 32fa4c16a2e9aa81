//! `rollpoint resume`: after any crash, sweep what the crashed process left,
//! decide per task what to do ([`crate::plan`]), restore the newest intact
//! checkpoint's attempts (or the one asked for) as their next attempts, start
//! the rest over, and drive the loop to the end.
//!
//! A checkpoint is intact when its document, every manifest and every
//! record verify ([`store::verify`]) and its records decode. A damaged one
//! is named on stderr with what is wrong, marked
//! (`checkpoints/<id>/DAMAGED`, nothing of it deleted) and passed over for
//! the next older published one; with none intact every unfinished rollout
//! starts over. A checkpoint asked for by id must be published and intact,
//! or the resume fails before changing anything.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rollpoint_checkpoint::StoreError;
use rollpoint_checkpoint::store::{self, CheckpointDoc, Published};
use rollpoint_driver::RolloutTask;
use rollpoint_proto::key::RolloutId;

use crate::controller::{Ending, Inputs, Loop};
use crate::endpoint;
use crate::errors::RunError;
use crate::events::Event;
use crate::plan::{drop_unsaved_sessions, plan_resume};
use crate::results::read_results;
use crate::saved::{Saved, Sessions, retained_checkpoints, saved_sessions};
use crate::stack::{Stack, open_backend};
use crate::state::RunState;
use crate::tasks::load_tasks;
use rollpoint_proto::clock::unix_ms;

/// The checkpoint a resume restores from, verified, and what it saved.
#[derive(Debug)]
pub struct Source {
    pub id: String,
    pub doc: CheckpointDoc,
    pub sessions: Sessions,
    pub saved: Saved,
}

/// Whether a checkpoint can be restored from.
enum Check {
    Intact(Box<Source>),
    Damaged(String),
}

fn checkpoint_error(id: &str, message: impl std::fmt::Display) -> RunError {
    RunError::checkpoint(id.to_owned(), message.to_string())
}

/// Verifies published checkpoint `p`: an error only when it could not be
/// read (not damage), so nothing is decided on a passing I/O failure.
fn check(run_dir: &Path, p: Published) -> Result<Check, RunError> {
    let id = p.id;
    let classify = |e: StoreError| {
        if e.is_damage() {
            Ok(Check::Damaged(e.to_string()))
        } else {
            Err(checkpoint_error(&id, e))
        }
    };
    let doc = match p.doc {
        Ok(doc) => doc,
        Err(e) => return classify(e),
    };
    if let Err(e) = store::verify(run_dir, &id) {
        return classify(e);
    }
    // Every record verified: one the participants' formats cannot read is
    // as unusable as a damaged one.
    match saved_sessions(run_dir, &id) {
        Ok((sessions, saved)) => Ok(Check::Intact(Box::new(Source {
            id,
            doc,
            sessions,
            saved,
        }))),
        Err(RunError::Checkpoint { source, .. }) => Ok(Check::Damaged(source.to_string())),
        Err(e) => Err(e),
    }
}

/// The checkpoint to restore from: `asked` (published and intact, else an
/// error naming it, nothing changed), or the newest intact published one,
/// each damaged one on the way named on stderr and marked. `None`: nothing
/// was published, or nothing published is intact.
pub fn choose_source(run_dir: &Path, asked: Option<&str>) -> Result<Option<Source>, RunError> {
    let list = store::published(run_dir).map_err(|e| checkpoint_error("LATEST", e))?;
    if let Some(id) = asked {
        let names: Vec<&str> = list.iter().map(|p| p.id.as_str()).collect();
        let Some(at) = list.iter().position(|p| p.id == id) else {
            return Err(checkpoint_error(
                id,
                format!(
                    "no such published checkpoint in {} (published: {}); nothing was changed",
                    store::checkpoints_dir(run_dir).display(),
                    if names.is_empty() {
                        "none".to_owned()
                    } else {
                        names.join(", ")
                    }
                ),
            ));
        };
        if let Some(reason) = store::damaged(run_dir, id).map_err(|e| checkpoint_error(id, e))? {
            return Err(checkpoint_error(
                id,
                format!(
                    "marked damaged by an earlier resume ({reason}; see {}); nothing was changed",
                    store::checkpoint_dir(run_dir, id)
                        .join(store::DAMAGED_FILE)
                        .display()
                ),
            ));
        }
        let p = list
            .into_iter()
            .nth(at)
            .ok_or_else(|| checkpoint_error(id, "vanished"))?;
        return match check(run_dir, p)? {
            Check::Intact(source) => Ok(Some(*source)),
            Check::Damaged(why) => Err(checkpoint_error(
                id,
                format!("damaged: {why}; nothing was changed"),
            )),
        };
    }
    let mut passed = Vec::new();
    for p in list {
        let id = p.id.clone();
        if let Some(reason) = store::damaged(run_dir, &id).map_err(|e| checkpoint_error(&id, e))? {
            tracing::warn!(
                checkpoint = %id,
                reason = %reason,
                "checkpoint was found damaged by an earlier resume; passed over"
            );
            passed.push(id);
            continue;
        }
        match check(run_dir, p)? {
            Check::Intact(source) => {
                if !passed.is_empty() {
                    tracing::info!(
                        checkpoint = %source.id,
                        passed_over = %passed.join(", "),
                        "resuming from the newest intact checkpoint"
                    );
                }
                return Ok(Some(*source));
            }
            Check::Damaged(why) => {
                store::mark_damaged(run_dir, &id, &why).map_err(|e| checkpoint_error(&id, e))?;
                let marker = store::checkpoint_dir(run_dir, &id).join(store::DAMAGED_FILE);
                tracing::warn!(
                    checkpoint = %id,
                    reason = %why,
                    marked = marker.exists().then(|| marker.display().to_string()),
                    "checkpoint is damaged; falling back to an older checkpoint (nothing of it is deleted)"
                );
                passed.push(id);
            }
        }
    }
    if !passed.is_empty() {
        tracing::warn!(
            damaged = %passed.join(", "),
            "no intact checkpoint: every unfinished rollout starts over as its next attempt"
        );
    }
    Ok(None)
}

/// With a checkpoint store, brings what it publishes into the run directory first, so the
/// choice below sees every checkpoint the store holds (this node may hold none of them). A
/// store that cannot be reached is reported and the local copy is used: `LATEST` here only
/// ever follows the store, so it is at most one checkpoint behind it.
async fn fetch_published(
    run_dir: &Path,
    config: &crate::config::RunConfig,
) -> Result<(), RunError> {
    let Some(remote) = config.open_checkpoint_store()? else {
        return Ok(());
    };
    match store::remote::fetch(&remote, run_dir).await {
        Ok(fetched) => {
            for bad in &fetched.unreadable {
                tracing::warn!(store = %remote.url(), problem = %bad, "a publish marker of the checkpoint store cannot be read");
            }
            tracing::info!(store = %remote.url(), latest = fetched.latest.as_deref().unwrap_or("none"), files = fetched.files, "checkpoint store read");
        }
        Err(e) => {
            tracing::warn!(store = %remote.url(), error = %e, "the checkpoint store cannot be read; resuming from the local copy");
        }
    }
    Ok(())
}

/// `rollpoint resume`: continues the run in `run_dir` from checkpoint
/// `checkpoint` (default: the newest intact one).
pub async fn resume(
    run_dir: &Path,
    checkpoint: Option<&str>,
    supervisor: Option<PathBuf>,
    env: BTreeMap<String, String>,
    inputs: Inputs,
) -> Result<Ending, RunError> {
    let began = std::time::Instant::now();
    let ms = |since: std::time::Instant| since.elapsed().as_millis();
    let run_dir = std::fs::canonicalize(run_dir).map_err(|e| RunError::io(run_dir, e))?;
    let _lock = crate::lock::RunLock::acquire(&run_dir)?;
    let mut state = RunState::load(&run_dir)?;
    let tasks = load_tasks(&state.tasks_path)?.with_samples(state.config.samples)?;
    // Said again at every resume: the log of this process must say it too.
    let _ = crate::state::trusted_rollouts(&tasks.tasks);
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
    for (i, req) in inputs.forks.iter().enumerate() {
        req.check()
            .map_err(|e| RunError::setup("fork", format!("fork {i}: {e}")))?;
        crate::fork::plan(&run_dir, &state.attempts, req)?;
    }
    let finished: std::collections::BTreeSet<String> = read_results(&run_dir)?
        .into_iter()
        .map(|r| r.rollout)
        .collect();
    // This directory's claim on the checkpoint store first: one taken over is fenced.
    let keeper = crate::lease::hold(
        &state.config,
        &run_dir,
        crate::lease::Acquire::Resume,
        &inputs.loop_tx,
    )
    .await?;
    fetch_published(&run_dir, &state.config).await?;
    let read_ms = ms(began);
    let source = choose_source(&run_dir, checkpoint)?;
    let chosen_ms = ms(began);
    let supervisor = supervisor
        .or_else(|| state.config.supervisor.clone())
        .ok_or_else(|| RunError::setup("supervisor", "no supervisor binary given"))?;
    let backend = open_backend(&run_dir, &state.config, supervisor)?;
    let opened_ms = ms(began);
    let swept = backend
        .sweep_orphans()
        .map_err(|e| RunError::setup("sweep", e))?;
    if !swept.is_empty() {
        tracing::info!(
            sandboxes = swept.len(),
            "swept the sandboxes of the crashed run"
        );
    }
    let retained: Vec<String> = retained_checkpoints(&run_dir)?;
    let keep: Vec<&str> = retained.iter().map(String::as_str).collect();
    backend
        .sweep_snapshots(&keep)
        .map_err(|e| RunError::setup("sweep", e))?;
    tracing::debug!(
        read_ms,
        chosen_ms,
        opened_ms,
        swept_ms = ms(began),
        "resume: state read, checkpoint chosen, sandboxes opened, the crashed run swept"
    );

    let mut plan = plan_resume(
        &order,
        &finished,
        &state.attempts,
        source.as_ref().map(|s| s.doc.scope.as_slice()),
    );
    if let Some(src) = &source {
        for k in drop_unsaved_sessions(&mut plan, &src.sessions, &src.saved) {
            tracing::warn!(
                key = %k,
                checkpoint = %src.id,
                "the checkpoint holds no sandbox for the attempt's session; it starts over"
            );
        }
    }
    let source = source.map(|s| s.id);
    let mut by_id: BTreeMap<String, RolloutTask> = tasks
        .tasks
        .into_iter()
        .map(|t| (t.rollout().to_owned(), t))
        .collect();
    for (branch, f) in &state.forks {
        by_id.insert(branch.clone(), f.task.clone());
    }

    let stack = Stack::build(
        &run_dir,
        &state.config,
        backend,
        &inputs.program,
        state.gateway_port,
    )
    .await?;
    // A run killed before its gateway first listened has no port yet: this one is its port.
    if state.gateway_port != stack.gateway_port {
        state.gateway_port = stack.gateway_port;
        state.save(&run_dir)?;
    }
    let mut lp = Loop::new(
        run_dir.clone(),
        stack,
        state.clone(),
        order.len(),
        finished.len(),
        source.clone(),
        env,
    )?;
    if state.config.retry_infra > 0 {
        lp.tasks = by_id
            .iter()
            .filter(|(id, _)| !state.forks.contains_key(*id))
            .map(|(id, t)| {
                (
                    id.clone(),
                    t.clone().with_limits(&state.config.sandbox_limits),
                )
            })
            .collect();
    }

    if let (Some(source), false) = (&source, plan.restore.is_empty()) {
        let id = format!("restore-{}", unix_ms());
        let restored = lp
            .stack
            .coordinator
            .restore(&id, source, &plan.restore)
            .await
            .map_err(|e| RunError::checkpoint(source.clone(), e))?;
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
            .map_err(|e| RunError::checkpoint(id.clone(), e))?;
        tracing::info!(
            checkpoint = %source,
            rollouts = lp.in_flight.len(),
            "restored rollouts from a checkpoint"
        );
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
            // A branch its checkpoint does not hold yet is forked again from its source,
            // while that is retained, as the attempt after the one that ran.
            let refork = state
                .forks
                .get(k.rollout().as_str())
                .filter(|f| store::read_checkpoint(&run_dir, &f.checkpoint).is_ok());
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
        if let Some(task) = by_id.get(rollout.as_str()) {
            lp.register(task.clone()).await?;
        }
    }
    lp.events.record(Event::Resumed {
        from: source.clone(),
        restored: lp
            .in_flight
            .len()
            .saturating_sub(plan.retire.len() + plan.fresh.len()),
        started_over: plan.retire.len(),
        finished: finished.len(),
    });
    // Pin the new attempts at once, so a crash now resumes them, not the
    // attempts this resume replaced.
    if !lp.in_flight.is_empty() {
        lp.checkpoint(None, false, Duration::ZERO).await?;
    }
    for req in &inputs.forks {
        let made = lp.fork(req).await?;
        tracing::info!(
            checkpoint = %made.checkpoint,
            branches = %made.branches.join(", "),
            "the branches run with the rest of the run"
        );
    }
    let serving = match inputs.listen {
        Some(listen) => {
            let reach = endpoint::Reach {
                runs: lp.stack.runs.clone(),
                owner: std::sync::Arc::clone(&lp.stack.owner),
                backend: std::sync::Arc::clone(&lp.stack.backend),
            };
            Some(endpoint::start(&lp.run_dir, listen, reach).await?)
        }
        None => None,
    };
    let ending = lp
        .drive(inputs.signals, inputs.grace, inputs.stop_requested)
        .await;
    drop(serving);
    if let Some(keeper) = keeper {
        keeper.release().await;
    }
    ending
}
