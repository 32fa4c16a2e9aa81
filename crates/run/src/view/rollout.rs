//! One rollout's document: its row (once it has one) or what the live run holds, its calls
//! from the ledger with their messages, the checkpoints taken while it ran, its output and
//! its trajectory's summary. Each file is read once: one rollout reads only its own calls
//! (and builds its trajectory from them), the report reads the ledger once for all.

use std::collections::BTreeMap;
use std::path::Path;

use rollpoint_driver::RolloutResult;
use rollpoint_gateway::LedgerRecord;
use rollpoint_trajectory::Trajectory;

use super::output::launch_outputs;
use super::run::{LiveRollout, status_name};
use super::turns::{CallView, calls_by_rollout};
use super::{CheckpointMark, LaunchLine, RolloutView, TrajectorySummary, VIEW_VERSION};
use crate::errors::RunError;
use crate::events::{Event, EventLine, read_events};
use crate::gateway::LEDGER;
use crate::results::read_results;
use crate::state::RunState;
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
    Ok(Some(build(
        run_dir,
        id,
        row,
        live,
        calls,
        &files.events,
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
            build(
                run_dir,
                id,
                rows.get(id.as_str()).copied(),
                None,
                calls.remove(id).unwrap_or_default(),
                &files.events,
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

fn build(
    run_dir: &Path,
    id: &str,
    row: Option<&RolloutResult>,
    live: Option<&LiveRollout>,
    calls: Vec<CallView>,
    events: &[EventLine],
    trajectory: Option<&Trajectory>,
) -> RolloutView {
    let state = match (row, live) {
        (Some(r), _) => status_name(r.status),
        (None, Some(l)) => l.state,
        (None, None) => "unfinished",
    };
    let launches: Vec<LaunchLine> = match (row, live) {
        (Some(r), _) => r.launches.iter().map(LaunchLine::from).collect(),
        (None, Some(l)) => l.launches.iter().map(LaunchLine::from).collect(),
        (None, None) => Vec::new(),
    };
    let started = row
        .map(|r| r.timings.started_at_ms)
        .or(live.and_then(|l| l.started_ms))
        .or(launches.first().map(|l| l.start_ms));
    let ended = row.map(|r| r.timings.ended_at_ms);
    let checkpoints = events
        .iter()
        .filter_map(|e| match &e.event {
            Event::Checkpoint { id, .. }
                if started.is_some_and(|s| e.at_ms >= s) && ended.is_none_or(|t| e.at_ms <= t) =>
            {
                Some(CheckpointMark {
                    id: id.clone(),
                    at_ms: e.at_ms,
                })
            }
            _ => None,
        })
        .collect();
    RolloutView {
        v: VIEW_VERSION,
        id: id.to_owned(),
        state: state.to_owned(),
        resources: row
            .and_then(|r| r.resources.as_ref())
            .and_then(|r| serde_json::to_value(r).ok()),
        result: row.and_then(|r| serde_json::to_value(r).ok()),
        output: launch_outputs(run_dir, &launches),
        launches,
        calls,
        checkpoints,
        trajectory: trajectory.map(summary),
    }
}

fn summary(t: &Trajectory) -> TrajectorySummary {
    let mut policy_versions: Vec<String> = Vec::new();
    for s in &t.segments {
        for p in &s.policy_versions {
            if !policy_versions.contains(p) {
                policy_versions.push(p.clone());
            }
        }
    }
    TrajectorySummary {
        trainable: t.trainable,
        reason: t.not_trainable.as_ref().map(|n| n.message.clone()),
        turns: t.metrics.turns,
        tool_calls: t.metrics.tool_calls,
        prompt_tokens: t.metrics.prompt_tokens,
        completion_tokens: t.metrics.completion_tokens,
        segments: t.segments.len(),
        policy_versions,
    }
}
