//! Trajectories of a run's rollouts (`rollpoint export`, `GET /v1/rollouts/{id}/trajectory`):
//! the gateway's ledger read straight from its file (the gateway may be running) and each
//! rollout's last result for its reward, launches and pauses.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use rollpoint_driver::RolloutResult;
use rollpoint_trajectory::{BreakPolicy, Breaks, Grouped, Outcome, Trajectory};

use crate::errors::RunError;
use crate::files::results::read_results;
use crate::files::state::RunState;
use crate::stack::gateway::LEDGER;

/// The trajectories of `rollout`, or of every rollout of the run (by id), under the run's
/// `token_breaks` and `version_breaks` policies.
pub fn trajectories(run_dir: &Path, rollout: Option<&str>) -> Result<Vec<Trajectory>, RunError> {
    let ledger = run_dir.join(LEDGER);
    let state = RunState::path(run_dir);
    if !state.exists() && !ledger.exists() {
        return Err(RunError::state(
            state,
            "not a run directory: it has no run state and no gateway ledger",
        ));
    }
    let policy = if state.exists() {
        breaks(&RunState::load(run_dir)?)
    } else {
        Breaks::from(BreakPolicy::Split)
    };
    let records = if ledger.exists() {
        rollpoint_gateway::ledger::read_for_trajectories(&ledger, rollout)
            .map_err(|e| RunError::state(ledger.clone(), e))?
    } else {
        Vec::new()
    };
    let rows = read_results(run_dir)?;
    Ok(build(&records, &rows, rollout, policy))
}

/// The run's break policies.
pub(crate) fn breaks(state: &RunState) -> Breaks {
    Breaks {
        tokens: state.config.token_breaks,
        versions: state.config.version_breaks,
    }
}

/// The trajectories of `rollout` (or of every rollout with a row or a call) from ledger
/// `records` (answers and tokens at least) and result `rows`.
pub(crate) fn build(
    records: &[rollpoint_gateway::LedgerRecord],
    rows: &[RolloutResult],
    rollout: Option<&str>,
    policy: Breaks,
) -> Vec<Trajectory> {
    let mut results: BTreeMap<&str, &RolloutResult> = BTreeMap::new();
    for r in rows {
        if rollout.is_none_or(|id| id == r.rollout) {
            results.insert(&r.rollout, r);
        }
    }
    let mut ids: BTreeSet<&str> = results.keys().copied().collect();
    for r in records {
        if let rollpoint_gateway::LedgerRecord::Call(c) = r {
            ids.insert(&c.rollout);
        }
    }
    if let Some(id) = rollout {
        ids.retain(|r| *r == id);
    }
    let grouped = Grouped::new(records);
    ids.iter()
        .map(|id| {
            let outcome = results.get(id).map(|r| Outcome::of(r));
            grouped.build(id, outcome.as_ref(), policy)
        })
        .collect()
}

/// How `rollpoint export` writes trajectories.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// One trajectory document per line.
    Jsonl,
    /// One row per segment (`rollpoint_trajectory::parquet`).
    Parquet,
}

/// Writes the trajectories of every rollout of `run_dir` to `out` (atomically, mode 0600),
/// or returns them when `out` is `None`; and how many there were.
pub fn export(
    run_dir: &Path,
    format: Format,
    out: Option<&Path>,
) -> Result<(Vec<u8>, usize), RunError> {
    let all = trajectories(run_dir, None)?;
    let bytes = match format {
        Format::Jsonl => {
            let mut bytes = Vec::new();
            for t in &all {
                rollpoint_trajectory::jsonl::write_line(&mut bytes, t);
            }
            bytes
        }
        Format::Parquet => rollpoint_trajectory::parquet::write(&all)
            .map_err(|message| RunError::setup("export", message))?,
    };
    if let Some(path) = out {
        crate::files::state::write_atomic(path, &bytes)?;
        return Ok((Vec::new(), all.len()));
    }
    Ok((bytes, all.len()))
}
