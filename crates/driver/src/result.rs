//! The rollout result: what one rollout produced, in a versioned format.

use rollpoint_owner::Verdict;
use serde::{Deserialize, Serialize};

use crate::launchlog::LaunchEntry;

/// Version of [`RolloutResult`].
pub const RESULT_VERSION: u32 = 1;

/// How the rollout ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[schema(as = RolloutResultStatus)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Graded by the owner: `verdict` is set.
    Verified,
    /// The harness ran and the task asks for no grading.
    Unverified,
    /// Something failed before a verdict: `error` says what.
    Failed,
    /// Cancelled by the caller.
    Cancelled,
}

impl Status {
    /// The name it is written as.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Verified => "verified",
            Self::Unverified => "unverified",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
        }
    }
}

/// Model usage the adapter collected from the harness.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Usage {
    pub model_calls: u64,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub total_tokens: u64,
}

/// When the rollout ran, Unix milliseconds.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[schema(as = RolloutTimings)]
#[serde(deny_unknown_fields)]
pub struct Timings {
    /// Start of its first attempt.
    pub started_at_ms: u64,
    pub ended_at_ms: u64,
    /// Time the harness ran, summed over launches (paused time included).
    pub harness_ms: u64,
    /// Time checkpoints held its launches.
    pub paused_ms: u64,
}

/// One rollout's result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RolloutResult {
    pub v: u32,
    pub task_id: String,
    pub rollout: String,
    /// The attempt that produced it (0 when no crash intervened).
    pub attempt: u32,
    pub status: Status,
    /// The owner's verdict (status `verified`).
    #[serde(default)]
    pub verdict: Option<Verdict>,
    /// The verdict's reward, repeated for readers that want only it.
    #[serde(default)]
    pub reward: Option<f64>,
    #[serde(default)]
    pub error: Option<String>,
    /// Nothing could be saved of it (not capturable, or checkpointing off).
    pub restart: bool,
    pub launches: Vec<LaunchEntry>,
    #[serde(default)]
    pub usage: Option<Usage>,
    /// What its sandbox used: CPU, peak memory, disk, the relay's bytes,
    /// and the limits that stopped something.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<rollpoint_owner::ResourceUsage>,
    /// The harness's final answer, when its adapter can read it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response: Option<String>,
    /// The conversation as the harness's session recorded it (real
    /// harnesses only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub transcript: Vec<TranscriptEntry>,
    pub timings: Timings,
    /// Where this rollout was forked from, for a branch (`<rollout>~<n>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forked_from: Option<ForkedFrom>,
}

/// The saved state a branch of a forked rollout started from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ForkedFrom {
    /// The source rollout.
    pub rollout: String,
    /// The checkpoint that saved it.
    pub checkpoint: String,
    /// The source's last model call there (the branch point), if it had made one.
    #[serde(default)]
    pub call: Option<String>,
}

/// One message of a harness's conversation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TranscriptEntry {
    /// `user`, `assistant` or `tool`.
    pub role: String,
    /// The message's text parts, joined.
    #[serde(default)]
    pub text: String,
    /// The shell commands (or other tool inputs) the message asked for.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<String>,
}

/// What an adapter read from the harness once it was done: evidence for
/// the result, not the grade.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Collected {
    pub usage: Option<Usage>,
    /// The harness's final answer.
    pub response: Option<String>,
    pub transcript: Vec<TranscriptEntry>,
}
