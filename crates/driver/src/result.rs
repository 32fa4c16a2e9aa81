//! The rollout result: what one rollout produced, in a versioned format.

use rollpoint_owner::Verdict;
use serde::{Deserialize, Serialize};

use crate::launchlog::LaunchEntry;

/// Version of [`RolloutResult`]. Version 1 (read too) called an
/// infrastructure failure `failed` and had no class for it.
pub const RESULT_VERSION: u32 = 2;
/// The oldest version of [`RolloutResult`] still read.
pub const RESULT_VERSION_OLDEST: u32 = 1;

/// How the rollout ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[schema(as = RolloutResultStatus)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Graded by the owner: `verdict` is set.
    Verified,
    /// The harness ran and the task asks for no grading.
    Unverified,
    /// The infrastructure ended the rollout before a verdict (`infra_class`
    /// says how, `error` what): never a reward, whatever the policy did.
    #[serde(alias = "failed")]
    InfraError,
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
            Self::InfraError => "infra_error",
            Self::Cancelled => "cancelled",
        }
    }
}

/// How the infrastructure ended a rollout (status `infra_error`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum InfraClass {
    /// The sandbox or its session went away, or its backend failed, mid-rollout.
    SandboxLost,
    /// Making the sandbox, putting the task's files in or its setup failed.
    SetupFailed,
    /// The harness could not be started.
    LaunchFailed,
    /// The harness ended while its model calls found no upstream.
    ModelUnreachable,
    /// The task's environment image could not be built.
    BuildFailed,
    /// Building the environment outran its time.
    TimeoutInfra,
    /// A saved rollout could not be brought back.
    RestoreFailed,
    /// A rollpoint bug: the stage machine stopped without a result.
    Internal,
    /// Written by version 1, which did not say.
    Unclassified,
}

impl InfraClass {
    /// The name it is written as.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::SandboxLost => "sandbox_lost",
            Self::SetupFailed => "setup_failed",
            Self::LaunchFailed => "launch_failed",
            Self::ModelUnreachable => "model_unreachable",
            Self::BuildFailed => "build_failed",
            Self::TimeoutInfra => "timeout_infra",
            Self::RestoreFailed => "restore_failed",
            Self::Internal => "internal",
            Self::Unclassified => "unclassified",
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
    /// How the infrastructure ended it (status `infra_error`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub infra_class: Option<InfraClass>,
    /// Attempts before this one that the infrastructure ended and the run
    /// started again in a fresh sandbox (`retry_infra`), oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub infra_retries: Vec<InfraClass>,
    /// The group of samples of one task this rollout belongs to (`samples`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
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

impl RolloutResult {
    /// Reads a result of any version still read, upgraded to the current one.
    pub fn decode(bytes: &[u8]) -> Result<Self, rollpoint_proto::FormatError> {
        rollpoint_proto::decode_since(
            "rollout result",
            RESULT_VERSION_OLDEST,
            RESULT_VERSION,
            bytes,
        )
        .map(Self::upgraded)
    }

    /// This result at the current version: a version 1 `failed` is an
    /// infrastructure error it did not classify.
    #[must_use]
    pub fn upgraded(mut self) -> Self {
        if self.v < RESULT_VERSION {
            if self.status == Status::InfraError && self.infra_class.is_none() {
                self.infra_class = Some(InfraClass::Unclassified);
            }
            self.v = RESULT_VERSION;
        }
        self
    }

    /// A result the infrastructure ended (`class`, `error`) with nothing
    /// else known of it: no verdict, no reward, no launches.
    #[must_use]
    pub fn infra_error(
        task_id: &str,
        rollout: &str,
        attempt: u32,
        class: InfraClass,
        error: String,
        timings: Timings,
    ) -> Self {
        Self {
            v: RESULT_VERSION,
            task_id: task_id.to_owned(),
            rollout: rollout.to_owned(),
            attempt,
            status: Status::InfraError,
            verdict: None,
            reward: None,
            error: Some(error),
            infra_class: Some(class),
            infra_retries: Vec::new(),
            group: None,
            restart: false,
            launches: Vec::new(),
            usage: None,
            resources: None,
            response: None,
            transcript: Vec::new(),
            timings,
            forked_from: None,
        }
    }

    /// The policy ended it: a verdict (or an ungraded run), not the
    /// infrastructure and not a cancel.
    #[must_use]
    pub fn ended_by_policy(&self) -> bool {
        matches!(self.status, Status::Verified | Status::Unverified)
    }
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

impl TranscriptEntry {
    pub fn new(role: &str, text: String, tool_calls: Vec<String>) -> Self {
        Self {
            role: role.to_owned(),
            text,
            tool_calls,
        }
    }
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
