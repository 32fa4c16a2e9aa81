//! The documents' parts any service builds the same way: a rollout's line from its result
//! row or from where its driver stands, the totals rows give, pass@k by group, and one
//! rollout's document from its parts. Pure: what is read, and from where, is the service's.

use rollpoint_driver::{RolloutResult, Status};
use rollpoint_trajectory::Trajectory;

use crate::live::LiveRollout;
use crate::turns::CallView;
use crate::{
    CheckpointMark, GroupLine, GroupsView, LaunchLine, RolloutLine, RolloutView, Summary,
    TrajectorySummary, VIEW_VERSION, output::LaunchOutput,
};

/// A row's status as the page names it.
#[must_use]
pub fn status_name(s: Status) -> &'static str {
    match s {
        Status::Verified => "verified",
        Status::Unverified => "unverified",
        Status::InfraError => "infra_error",
        Status::Cancelled => "cancelled",
    }
}

impl From<&RolloutResult> for RolloutLine {
    /// A finished rollout's line, from its row.
    fn from(r: &RolloutResult) -> Self {
        let usage = r.usage.as_ref();
        Self {
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

impl From<&LiveRollout> for RolloutLine {
    /// An unfinished rollout's line, from where its driver stands.
    fn from(l: &LiveRollout) -> Self {
        Self {
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
}

/// The totals `rows` and the table's `lines` give (the run's events are the service's to
/// count).
#[must_use]
pub fn summarize_rows(rows: &[RolloutResult], lines: &[RolloutLine]) -> Summary {
    let mut s = Summary::default();
    let mut reward_sum = 0.0;
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
            s.cpu_ms = Some(s.cpu_ms.unwrap_or(0) + res.cpu_ms);
            if let Some(p) = res.memory_peak_bytes {
                s.memory_peak_bytes = Some(s.memory_peak_bytes.map_or(p, |q| q.max(p)));
            }
        }
    }
    for l in lines {
        *s.states.entry(l.state.clone()).or_default() += 1;
        s.launches += l.launches.len();
    }
    s.reward_mean = (s.rewarded > 0).then(|| reward_sum / s.rewarded as f64);
    s.done = rows.len();
    s
}

/// Pass@k by group, for runs with `samples`.
#[must_use]
pub fn groups_view(rows: &[RolloutResult]) -> Option<GroupsView> {
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

/// What one rollout's document is made of.
#[derive(Debug, Default)]
pub struct RolloutParts<'a> {
    pub row: Option<&'a RolloutResult>,
    pub live: Option<&'a LiveRollout>,
    pub calls: Vec<CallView>,
    /// Every checkpoint the service knows of (id and time); those taken while the rollout
    /// was in flight are kept.
    pub checkpoints: Vec<CheckpointMark>,
    pub output: Vec<LaunchOutput>,
    pub trajectory: Option<&'a Trajectory>,
}

impl RolloutParts<'_> {
    /// The launches the document shows: its row's, else where its driver stands.
    #[must_use]
    pub fn launches(&self) -> Vec<LaunchLine> {
        match (self.row, self.live) {
            (Some(r), _) => r.launches.iter().map(LaunchLine::from).collect(),
            (None, Some(l)) => l.launches.iter().map(LaunchLine::from).collect(),
            (None, None) => Vec::new(),
        }
    }

    /// Rollout `id`'s document.
    #[must_use]
    pub fn build(self, id: &str) -> RolloutView {
        let state = match (self.row, self.live) {
            (Some(r), _) => status_name(r.status),
            (None, Some(l)) => l.state,
            (None, None) => "unfinished",
        };
        let launches = self.launches();
        let started = self
            .row
            .map(|r| r.timings.started_at_ms)
            .or(self.live.and_then(|l| l.started_ms))
            .or(launches.first().map(|l| l.start_ms));
        let ended = self.row.map(|r| r.timings.ended_at_ms);
        let checkpoints = self
            .checkpoints
            .into_iter()
            .filter(|c| started.is_some_and(|s| c.at_ms >= s) && ended.is_none_or(|t| c.at_ms <= t))
            .collect();
        RolloutView {
            v: VIEW_VERSION,
            id: id.to_owned(),
            state: state.to_owned(),
            resources: self
                .row
                .and_then(|r| r.resources.as_ref())
                .and_then(|r| serde_json::to_value(r).ok()),
            result: self.row.and_then(|r| serde_json::to_value(r).ok()),
            output: self.output,
            launches,
            calls: self.calls,
            checkpoints,
            trajectory: self.trajectory.map(trajectory_summary),
        }
    }
}

fn trajectory_summary(t: &Trajectory) -> TrajectorySummary {
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
