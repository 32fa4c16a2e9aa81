//! What the dashboards and the report show: a run as one document (its summary, events and a
//! line per rollout) and each rollout as another (its launches, its model calls from the
//! ledger with their messages, its checkpoints, its output, its trajectory), and the one page
//! that draws both. Each service builds the documents from what it holds (`rollpoint run`
//! from its run directory and drivers, `rollpoint serve agent` from its drivers and the
//! gateway, `serve coordinator` from its agents'), with the builders here; the report inlines
//! them, a dashboard fetches them and refetches when the run changes
//! (docs/design/dashboard.md).
#![forbid(unsafe_code)]

mod build;
pub mod groups;
pub mod http;
mod live;
mod output;
mod page;
mod turns;

use serde::{Deserialize, Serialize};

pub use build::{RolloutParts, groups_view, status_name, summarize_rows};
pub use live::{LiveRollout, LiveState, Marks};
pub use output::{LaunchOutput, launch_outputs, open_output, output_files};
pub use page::{Mode, render};
pub use turns::calls_by_rollout;

/// Version of the view documents.
pub const VIEW_VERSION: u32 = 1;

/// The run: summary, events and one line per rollout.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunView {
    pub v: u32,
    pub title: String,
    pub live: bool,
    pub generated_ms: u64,
    pub summary: Summary,
    pub groups: Option<GroupsView>,
    pub events: Vec<serde_json::Value>,
    pub rollouts: Vec<RolloutLine>,
}

/// The run's totals.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Summary {
    pub tasks: usize,
    pub done: usize,
    /// Rollouts by state: a finished row's status, or `running`, `paused`, `parked`,
    /// `queued` (live), `unfinished` (read from disk).
    pub states: std::collections::BTreeMap<String, usize>,
    pub infra_errors: std::collections::BTreeMap<String, usize>,
    pub reward_mean: Option<f64>,
    pub rewarded: usize,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub model_calls: u64,
    pub launches: usize,
    pub checkpoints: usize,
    pub checkpoints_failed: usize,
    pub fleet_pauses: usize,
    pub resumes: usize,
    pub crashes: usize,
    pub skipped_events: usize,
    pub started_ms: Option<u64>,
    pub ended_ms: Option<u64>,
    pub cpu_ms: Option<u64>,
    pub memory_peak_bytes: Option<u64>,
    pub trusted: Vec<String>,
}

/// Pass@k by group (runs with `samples`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GroupsView {
    pub k: usize,
    pub mean_pass_at_1: Option<f64>,
    pub mean_pass_at_k: Option<f64>,
    pub rows: Vec<GroupLine>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GroupLine {
    pub group: String,
    pub samples: usize,
    pub passed: usize,
    pub infra_errors: usize,
    pub pass_at_1: Option<f64>,
    pub pass_at_k: Option<f64>,
}

/// One rollout in the run's table.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RolloutLine {
    pub id: String,
    pub task: String,
    pub state: String,
    pub attempt: u32,
    pub reward: Option<f64>,
    pub error: Option<String>,
    pub infra_class: Option<String>,
    pub group: Option<String>,
    pub started_ms: Option<u64>,
    pub ended_ms: Option<u64>,
    pub calls: u64,
    pub tokens: u64,
    pub launches: Vec<LaunchLine>,
}

/// One launch of a rollout.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LaunchLine {
    pub id: String,
    pub attempt: u32,
    pub sandbox: String,
    pub start_ms: u64,
    pub end_ms: Option<u64>,
    /// It continued a saved session.
    pub resumed: bool,
    pub reason: String,
    pub end: Option<rollpoint_driver::LaunchEnd>,
    pub exit_code: Option<i32>,
    pub pauses: u32,
    pub paused_ms: u64,
    pub note: Option<String>,
}

impl From<&rollpoint_driver::LaunchEntry> for LaunchLine {
    fn from(l: &rollpoint_driver::LaunchEntry) -> Self {
        Self {
            id: l.launch_id.clone(),
            attempt: l.attempt,
            sandbox: l.sandbox.clone(),
            start_ms: l.started_at_ms,
            end_ms: l.ended_at_ms,
            resumed: l.resumed,
            reason: l.reason.clone(),
            end: l.end,
            exit_code: l.exit_code,
            pauses: l.pauses,
            paused_ms: l.paused_ms,
            note: l.note.clone(),
        }
    }
}

/// One rollout in full.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RolloutView {
    pub v: u32,
    pub id: String,
    pub state: String,
    /// Its result row, once it has one.
    pub result: Option<serde_json::Value>,
    pub launches: Vec<LaunchLine>,
    /// Its model calls in ledger order.
    pub calls: Vec<turns::CallView>,
    /// Checkpoints published while it was in flight.
    pub checkpoints: Vec<CheckpointMark>,
    /// The tail of each launch's output.
    pub output: Vec<LaunchOutput>,
    pub resources: Option<serde_json::Value>,
    pub trajectory: Option<TrajectorySummary>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CheckpointMark {
    pub id: String,
    pub at_ms: u64,
}

/// What its trajectory holds, without the tokens.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TrajectorySummary {
    pub trainable: bool,
    pub reason: Option<String>,
    pub turns: u64,
    pub tool_calls: u64,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub segments: usize,
    pub policy_versions: Vec<String>,
}

pub use turns::{CallView, Message, Reply, ToolCall};
