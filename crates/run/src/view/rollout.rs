//! One rollout's document: its row (once it has one) or what the live run holds, its calls
//! from the ledger with their messages, the checkpoints taken while it ran, its output and
//! its trajectory's summary. Each file is read once: one rollout reads only its own calls
//! (and builds its trajectory from them), the report reads the ledger once for all.

use std::collections::BTreeMap;
use std::path::Path;

use rollpoint_driver::RolloutResult;
use rollpoint_gateway::LedgerRecord;
use rollpoint_trajectory::Trajectory;
use rollpoint_view::{
    CallView, CheckpointMark, LiveRollout, RolloutParts, RolloutView, calls_by_rollout,
    launch_outputs,
};

use crate::errors::RunError;
use crate::files::events::{Event, EventLine, read_events};
use crate::files::results::read_results;
use crate::files::state::RunState;
use crate::stack::build::OWNER_DIR;
use crate::stack::gateway::LEDGER;
use crate::status::unfinished;

/// The document of rollout `id`, or `None` when the run knows nothing of it (no row, not
/// live, not unfinished, no model call).
pub fn rollout_view(
    run_dir: &Path,
    id: &str,
    live: Option<&LiveRollout>,
) -> Result<Option<RolloutView>, RunError> {
    let files = Files::read(run_dir, Some(id))?;
    let row = files.rows.iter().rev().find(|r| r.rollout == id);
    let calls = calls_by_rollout(&files.records)
        .remove(id)
        .unwrap_or_default();
    let unfinished = unfinished(&files.state, &files.rows)
        .iter()
        .any(|(r, _)| r == id);
    if row.is_none() && live.is_none() && !unfinished && calls.is_empty() {
        return Ok(None);
    }
    let trajectory = files.trajectories(Some(id)).into_iter().next();
    Ok(Some(files.build(
        run_dir,
        id,
        row,
        live,
        calls,
        trajectory.as_ref(),
    )))
}

/// The documents of every rollout with a row or a call, the run's files read once (the
/// report's).
pub fn all_rollout_views(run_dir: &Path) -> Result<Vec<RolloutView>, RunError> {
    let files = Files::read(run_dir, None)?;
    let rows: BTreeMap<&str, &RolloutResult> =
        files.rows.iter().map(|r| (r.rollout.as_str(), r)).collect();
    let mut calls = calls_by_rollout(&files.records);
    let trajectories: BTreeMap<String, Trajectory> = files
        .trajectories(None)
        .into_iter()
        .map(|t| (t.rollout.clone(), t))
        .collect();
    let mut ids: Vec<String> = rows.keys().map(|k| (*k).to_owned()).collect();
    ids.extend(
        calls
            .keys()
            .filter(|k| !rows.contains_key(k.as_str()))
            .cloned(),
    );
    Ok(ids
        .iter()
        .map(|id| {
            files.build(
                run_dir,
                id,
                rows.get(id.as_str()).copied(),
                None,
                calls.remove(id).unwrap_or_default(),
                trajectories.get(id),
            )
        })
        .collect())
}

/// What a rollout's document is made from, each file read once: the run's state, its rows,
/// its events and the ledger's calls of one rollout (or all) with every body they reference.
struct Files {
    state: RunState,
    rows: Vec<RolloutResult>,
    events: Vec<EventLine>,
    records: Vec<LedgerRecord>,
}

impl Files {
    fn read(run_dir: &Path, rollout: Option<&str>) -> Result<Self, RunError> {
        let ledger = run_dir.join(LEDGER);
        let records = if ledger.exists() {
            rollpoint_gateway::ledger::read_with_requests(&ledger, rollout)
                .map_err(|e| RunError::state(ledger.clone(), e))?
        } else {
            Vec::new()
        };
        Ok(Self {
            state: RunState::load(run_dir)?,
            rows: read_results(run_dir)?,
            events: read_events(run_dir)?.lines,
            records,
        })
    }

    /// Rollout `id`'s document from its parts; its output from the run's sandboxes.
    fn build(
        &self,
        run_dir: &Path,
        id: &str,
        row: Option<&RolloutResult>,
        live: Option<&LiveRollout>,
        calls: Vec<CallView>,
        trajectory: Option<&Trajectory>,
    ) -> RolloutView {
        let mut parts = RolloutParts {
            row,
            live,
            calls,
            checkpoints: self
                .events
                .iter()
                .filter_map(|e| match &e.event {
                    Event::Checkpoint { id, .. } => Some(CheckpointMark {
                        id: id.clone(),
                        at_ms: e.at_ms,
                    }),
                    _ => None,
                })
                .collect(),
            output: Vec::new(),
            trajectory,
        };
        parts.output = launch_outputs(&run_dir.join(OWNER_DIR), &parts.launches());
        parts.build(id)
    }

    /// The trajectories from the records already read (they hold answers and tokens).
    fn trajectories(&self, rollout: Option<&str>) -> Vec<Trajectory> {
        crate::export::build(
            &self.records,
            &self.rows,
            rollout,
            crate::export::breaks(&self.state),
        )
    }
}
