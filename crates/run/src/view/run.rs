//! The run's document: result rows, events and the run's state read from disk (each file
//! once; no checkpoint is verified: `rollpoint status` does that), and, for a live run,
//! where each unfinished rollout stands (the drivers' registry).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use rollpoint_driver::{LaunchEntry, RolloutResult, Status};
use serde_json::{Value, json};

use super::{GroupLine, GroupsView, LaunchLine, RolloutLine, RunView, Summary, VIEW_VERSION};
use crate::errors::RunError;
use crate::events::{Event, EventLine, read_events};
use crate::results::read_results;
use crate::state::RunState;
use crate::status::unfinished;

/// What a live run knows that its directory does not.
#[derive(Debug, Clone, Default)]
pub struct LiveState {
    /// Every rollout the drivers hold and has no row yet.
    pub rollouts: Vec<LiveRollout>,
}

/// One unfinished rollout of a live run.
#[derive(Debug, Clone)]
pub struct LiveRollout {
    pub id: String,
    pub attempt: u32,
    /// `queued`, `running`, `paused` (its launch frozen in place), `parked` (held, stopped
    /// or at its bookmark for a checkpoint) or `finishing` (its row is being written).
    pub state: &'static str,
    pub started_ms: Option<u64>,
    pub launches: Vec<LaunchEntry>,
}

impl LiveRollout {
    /// The state the view shows for a driver's run status.
    #[must_use]
    pub fn state_of(status: &rollpoint_driver::RunStatus) -> &'static str {
        use rollpoint_driver::RunStatus;
        use rollpoint_driver::machine::ParkKind;
        match status {
            RunStatus::Queued => "queued",
            RunStatus::Running => "running",
            RunStatus::Parked(ParkKind::Paused) => "paused",
            RunStatus::Parked(_) => "parked",
            RunStatus::Done => "finishing",
        }
    }
}

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
                lines.push(live_line(l));
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
        groups: groups(&rows),
        events: event_values(&events.lines, &lines),
        rollouts: lines,
    })
}

impl From<&RolloutResult> for RolloutLine {
    /// A finished rollout's line, from its row.
    fn from(r: &RolloutResult) -> Self {
        let usage = r.usage.as_ref();
        RolloutLine {
            id: r.rollout.clone(),
            task: r.task_id.clone(),
            state: status_name(r.status).to_owned(),
            attempt: r.attempt,
            reward: r.reward,
            error: r.error.clone(),
            infra_class: r.infra_class.map(|c| c.as_str().to_owned()),
            group: r.group.clone(),
            started_ms: Some(r.timings.started_at_ms),
            ended_ms: Some(r.timings.ended_at_ms),
            calls: usage.map_or(0, |u| u.model_calls),
            tokens: usage.map_or(0, |u| u.total_tokens),
            launches: r.launches.iter().map(LaunchLine::from).collect(),
        }
    }
}

fn live_line(l: &LiveRollout) -> RolloutLine {
    RolloutLine {
        id: l.id.clone(),
        task: l.id.clone(),
        state: l.state.to_owned(),
        attempt: l.attempt,
        reward: None,
        error: None,
        infra_class: None,
        group: None,
        started_ms: l.started_ms,
        ended_ms: None,
        calls: 0,
        tokens: 0,
        launches: l.launches.iter().map(LaunchLine::from).collect(),
    }
}

/// A row's status as the page names it.
pub(super) fn status_name(s: Status) -> &'static str {
    match s {
        Status::Verified => "verified",
        Status::Unverified => "unverified",
        Status::InfraError => "infra_error",
        Status::Cancelled => "cancelled",
    }
}

fn summarize(rows: &[RolloutResult], events: &[EventLine], lines: &[RolloutLine]) -> Summary {
    let mut s = Summary::default();
    let mut reward_sum = 0.0;
    let mut cpu: Option<u64> = None;
    let mut peak: Option<u64> = None;
    for r in rows {
        if r.status == Status::InfraError {
            let class = r.infra_class.map_or("unclassified", |c| c.as_str());
            *s.infra_errors.entry(class.to_owned()).or_default() += 1;
        }
        if let Some(x) = r.reward {
            reward_sum += x;
            s.rewarded += 1;
        }
        if let Some(u) = &r.usage {
            s.prompt_tokens += u.prompt_tokens;
            s.completion_tokens += u.completion_tokens;
            s.model_calls += u.model_calls;
        }
        if let Some(res) = &r.resources {
            cpu = Some(cpu.unwrap_or(0) + res.cpu_ms);
            if let Some(p) = res.memory_peak_bytes {
                peak = Some(peak.map_or(p, |q| q.max(p)));
            }
        }
    }
    for l in lines {
        *s.states.entry(l.state.clone()).or_default() += 1;
        s.launches += l.launches.len();
    }
    s.reward_mean = (s.rewarded > 0).then(|| reward_sum / s.rewarded as f64);
    s.cpu_ms = cpu;
    s.memory_peak_bytes = peak;
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

fn groups(rows: &[RolloutResult]) -> Option<GroupsView> {
    let groups = crate::groups::groups(rows);
    let k = groups.iter().map(|g| g.samples).filter(|n| *n > 0).min()?;
    let mean = |k| crate::groups::mean_pass_at_k(&groups, k).map(|(v, _)| v);
    Some(GroupsView {
        k,
        mean_pass_at_1: mean(1),
        mean_pass_at_k: mean(k),
        rows: groups
            .iter()
            .map(|g| GroupLine {
                group: g.id.clone(),
                samples: g.samples,
                passed: g.passed,
                infra_errors: g.infra_errors,
                pass_at_1: crate::groups::pass_at_k(g.samples, g.passed, 1),
                pass_at_k: crate::groups::pass_at_k(g.samples, g.passed, k),
            })
            .collect(),
    })
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
