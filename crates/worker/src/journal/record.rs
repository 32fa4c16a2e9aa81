//! The records of the checkpoint journal: one per boundary event. Each record is small and
//! carries only what happened at its boundary, so appending one costs the same whatever the
//! length of the transcript.

use serde::{Deserialize, Serialize};

use crate::transcript::{AssistantMessage, CallUsage, State, ToolStatus};

/// One journal record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Record {
    /// First record of every journal.
    Header(Header),
    /// The whole state; written right after the header when a journal is (re)written.
    Snapshot(Snapshot),
    /// A relaunch that continued from this journal.
    Launch(Launch),
    /// A model call was answered.
    ModelResponse(ModelResponse),
    /// A tool call is about to run: recorded durably before it runs, so a relaunch never runs
    /// a tool twice.
    ToolStarted(ToolStarted),
    /// A tool call finished; its output goes back to the model.
    ToolFinished(ToolFinished),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Header {
    pub rollout_id: String,
    /// Always true: a checkpoint is never a result and is never graded.
    pub partial: bool,
    pub created_unix_ms: u64,
    /// Version of the worker that started the journal.
    pub worker: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Snapshot {
    pub state: State,
}

/// A snapshot record that borrows the state, so a rewrite does not copy it first. Encodes
/// exactly as `Record::Snapshot`.
#[derive(Debug, Serialize)]
#[serde(tag = "kind", rename = "snapshot")]
pub struct SnapshotRef<'a> {
    pub state: &'a State,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Launch {
    pub launch: u32,
    pub elapsed_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelResponse {
    /// 0-based number of this model call in the rollout.
    pub call: u32,
    pub message: AssistantMessage,
    pub usage: CallUsage,
    pub elapsed_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolStarted {
    pub call_id: String,
    pub elapsed_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolFinished {
    pub call_id: String,
    pub content: String,
    pub status: ToolStatus,
    pub exit_code: Option<i32>,
    pub duration_ms: u64,
    pub truncated_bytes: u64,
    pub elapsed_ms: u64,
}
