//! The run's document: result rows, events and the run's state read from disk (each file
//! once; no checkpoint is verified: `rollpoint status` does that), and, for a live run,
//! where each unfinished rollout stands (the drivers' registry).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use rollpoint_driver::RolloutResult;
use rollpoint_view::{
    LiveState, RolloutLine, RunView, Summary, VIEW_VERSION, groups_view, summarize_rows,
};
use serde_json::{Value, json};

use crate::errors::RunError;
use crate::files::events::{Event, EventLine, read_events};
use crate::files::results::read_results;
use crate::files::state::RunState;
use crate::status::unfinished;

/// The run's document, from `run_dir` and, when the run is live, `live`.
pub fn run_view(run_dir: &Path, live: Option<&LiveState>) -> Result<RunView, RunError> {
    let state = RunState::load(run_dir)?;
    let rows = read_results(run_dir)?;
    let events = read_events(run_dir)?;
    let mut by_id: BTreeMap<&str, &RolloutResult> = BTreeMap::new();
    for r in &rows {
        by_id.insert(&r.rollout, r);
    }
    let mut lines: Vec<RolloutLine> = by_id.values().map(|r| RolloutLine::from(*r)).collect();
    let mut seen: BTreeSet<String> = by_id.keys().map(|s| (*s).to_owned()).collect();
    if let Some(live) = live {
        for l in &live.rollouts {
            if seen.insert(l.id.clone()) {
                lines.push(RolloutLine::from(l));
            }
        }
    }
    for (id, attempt) in &unfinished(&state, &rows) {
        if seen.insert(id.clone()) {
            lines.push(RolloutLine {
                id: id.clone(),
                task: id.clone(),
                state: if live.is_some() {
                    "queued"
                } else {
                    "unfinished"
                }
                .to_owned(),
                attempt: *attempt,
                reward: None,
                error: None,
                infra_class: None,
                group: None,
                started_ms: None,
                ended_ms: None,
                calls: 0,
                tokens: 0,
                launches: Vec::new(),
            });
        }
    }
    let mut summary = summarize(&rows, &events.lines, &lines);
    summary.tasks = state.attempts.len();
    summary.done = by_id.len();
    summary.skipped_events = events.skipped;
    summary.trusted = state.trusted.iter().cloned().collect();
    Ok(RunView {
        v: VIEW_VERSION,
        title: format!("rollpoint run {}", run_dir.display()),
        live: live.is_some(),
        generated_ms: rollpoint_proto::clock::unix_ms(),
        summary,
        groups: groups_view(&rows),
        events: event_values(&events.lines, &lines),
        rollouts: lines,
    })
}

/// The totals: the rows' and the table's (`rollpoint_view`), and the events'.
fn summarize(rows: &[RolloutResult], events: &[EventLine], lines: &[RolloutLine]) -> Summary {
    let mut s = summarize_rows(rows, lines);
    let mut stopped = false;
    for e in events {
        match &e.event {
            Event::Started { .. } => {
                s.started_ms.get_or_insert(e.at_ms);
            }
            Event::Checkpoint { .. } => s.checkpoints += 1,
            Event::CheckpointFailed { .. } => s.checkpoints_failed += 1,
            Event::Stopped { .. } => stopped = true,
            Event::Resumed { .. } => {
                s.resumes += 1;
                if !stopped {
                    s.crashes += 1;
                }
                stopped = false;
            }
            Event::FleetPaused { .. } => s.fleet_pauses += 1,
            Event::Finished { .. } => s.ended_ms = Some(e.at_ms),
            Event::Forked { .. }
            | Event::InfraRetry { .. }
            | Event::Exec { .. }
            | Event::FleetContinued { .. } => {}
        }
    }
    s
}

/// The events as the page reads them: a checkpoint's phase times flattened, and each resume
/// with whether a crash came before it and the last thing recorded before it
/// (`down_from_ms`), so the gap is drawn.
fn event_values(events: &[EventLine], lines: &[RolloutLine]) -> Vec<Value> {
    let mut marks: Vec<u64> = events.iter().map(|e| e.at_ms).collect();
    for l in lines {
        for launch in &l.launches {
            marks.push(launch.start_ms);
            marks.extend(launch.end_ms);
        }
        marks.extend(l.ended_ms);
    }
    marks.sort_unstable();
    let last_before = |at: u64| marks.iter().rev().find(|m| **m < at).copied();
    let mut stopped = false;
    let mut out = Vec::with_capacity(events.len());
    for e in events {
        let at = e.at_ms;
        let v = match &e.event {
            Event::Checkpoint {
                id,
                scope,
                restarts,
                timings: t,
            } => json!({
                "at_ms": at, "kind": "checkpoint", "id": id, "scope": scope,
                "restarts": restarts, "total_ms": t.total_ms, "prepare_ms": t.prepare_ms,
                "commit_ms": t.commit_ms, "publish_ms": t.publish_ms, "held_ms": t.held_ms,
                "resume_ms": t.resume_ms,
            }),
            Event::Resumed {
                from,
                restored,
                started_over,
                finished,
            } => {
                let crash = !stopped;
                stopped = false;
                json!({
                    "at_ms": at, "kind": "resumed", "from": from, "crash": crash,
                    "down_from_ms": last_before(at), "restored": restored,
                    "started_over": started_over, "finished": finished,
                })
            }
            other => {
                if matches!(other, Event::Stopped { .. }) {
                    stopped = true;
                }
                let mut v = serde_json::to_value(e).unwrap_or(Value::Null);
                if let Some(o) = v.as_object_mut() {
                    o.remove("v");
                }
                v
            }
        };
        out.push(v);
    }
    out
}
