//! The trajectory document (version [`TRAJECTORY_VERSION`]): one rollout's captured calls in
//! lineage order and their merge into token sequences with a loss mask, as `rollpoint
//! export` writes it (one per JSONL line) and `GET /v1/rollouts/{id}/trajectory` returns it.

use serde::{Deserialize, Serialize};

/// Version of a [`Trajectory`].
pub const TRAJECTORY_VERSION: u32 = 1;

/// What a token break does to the merged view (`token_breaks` in the run config).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum BreakPolicy {
    /// A new segment starts at the call whose prompt breaks.
    #[default]
    Split,
    /// The rollout is not trainable and every loss mask is 0.
    Mask,
}

/// What calls answered by different policy versions do to the merged view
/// (`version_breaks` in the run config).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum VersionPolicy {
    /// One segment may hold calls of several versions; each segment lists them.
    #[default]
    Keep,
    /// A new segment starts at a call whose version differs from the previous call's.
    Split,
    /// A rollout whose calls span versions is not trainable.
    Refuse,
}

/// How a trajectory's merged view treats token breaks and version changes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Breaks {
    pub tokens: BreakPolicy,
    pub versions: VersionPolicy,
}

impl From<BreakPolicy> for Breaks {
    fn from(tokens: BreakPolicy) -> Self {
        Self {
            tokens,
            versions: VersionPolicy::Keep,
        }
    }
}

/// Why a rollout is not trainable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    /// It made no model call.
    NoCalls,
    /// It has no result yet (still running, or lost).
    NotFinished,
    /// A call on its chain never had its reply recorded.
    UnansweredCall,
    /// A call's parent does not resolve to a recorded call.
    UnresolvedLineage,
    /// A call on its chain has no tokens (capture off, or the upstream gave none).
    MissingTokens,
    /// A call's token fields were malformed.
    CaptureError,
    /// A prompt does not extend the previous call's, and the policy is `mask`.
    TokenBreak,
    /// The infrastructure ended the rollout (`infra_error`): what it did is
    /// no sample of the policy; `message` names the class.
    InfraError,
    /// Its calls were answered by several policy versions and the policy is `refuse`.
    PolicyVersions,
}

/// Why, and at which call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NotTrainable {
    pub reason: Reason,
    pub call_id: Option<String>,
    pub message: String,
}

/// One call of the chain with its tokens.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TrajectoryCall {
    pub call_id: String,
    /// `chat` or `responses`.
    pub route: String,
    pub model: Option<String>,
    pub prompt_ids: Vec<u32>,
    pub completion_ids: Vec<u32>,
    /// One per completion id; `null` when the upstream gave none.
    pub logprobs: Option<Vec<f64>>,
    pub finish_reason: Option<String>,
    /// The recorded call this one was answered from (a replay after a restore).
    pub replayed_from: Option<String>,
    /// Time the upstream took for it (of the call it was replayed from).
    pub latency_ms: Option<u64>,
    /// The version of the weights that answered it, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy_version: Option<String>,
}

/// A call whose prompt does not start with the previous call's prompt and completion.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TokenBreak {
    /// Its index in `calls`.
    pub call_index: usize,
    pub call_id: String,
    /// The first token of its prompt that differs from what the previous call implies.
    pub position: usize,
}

/// One token sequence of the merged view: calls from `first_call` joined without a break.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Segment {
    pub first_call: usize,
    pub tokens: Vec<u32>,
    /// 1 on model-generated tokens, 0 on everything the harness added.
    pub loss_mask: Vec<u8>,
    /// Per token: the model's log-probability on generated tokens, 0 elsewhere; `null` when
    /// a call of the segment has none.
    pub logprobs: Option<Vec<f64>>,
    /// The policy versions that answered its calls, in order of first use (empty when none
    /// is known).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub policy_versions: Vec<String>,
}

/// Counts of what the rollout did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Metrics {
    /// Calls on the chain.
    pub turns: u64,
    /// Tool calls the model made on the chain.
    pub tool_calls: u64,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// Upstream time of the chain's calls.
    pub model_latency_ms: u64,
    /// Time checkpoints held its launches.
    pub paused_ms: u64,
    pub launches: u64,
    /// Checkpoints that paused it.
    pub checkpoints: u64,
}

/// One rollout's trajectory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Trajectory {
    pub v: u32,
    pub rollout: String,
    /// The attempt its result came from.
    pub attempt: u32,
    pub trainable: bool,
    pub not_trainable: Option<NotTrainable>,
    pub reward: Option<f64>,
    pub passed: Option<bool>,
    /// The group of samples of one task it belongs to (`samples`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// How the infrastructure ended it (`sandbox_lost`, ...), when it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub infra_class: Option<String>,
    pub calls: Vec<TrajectoryCall>,
    pub token_breaks: Vec<TokenBreak>,
    pub segments: Vec<Segment>,
    pub metrics: Metrics,
}
