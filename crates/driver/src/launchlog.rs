//! The launch log: every launch of a rollout, across attempts, with how it
//! started (resumed or not, and why), how it ended and how long checkpoints
//! held it. It travels in the bookmark and ends in the rollout's result.

use serde::{Deserialize, Serialize};

/// How a launch ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum LaunchEnd {
    /// The harness returned exit code 0.
    Finished,
    /// The driver stopped it (a park fallback, a cancel) or the attempt
    /// running it crashed.
    Interrupted,
    /// The harness returned a non-zero code or was killed by a signal the
    /// driver did not send.
    Failed,
}

/// How faithfully a harness continues a saved session after a crash.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum RecoveryTier {
    /// The saved conversation goes on with no message added.
    Exact,
    /// The harness needs one user turn to go on; its adapter documents the
    /// exact text it adds.
    ContinueTurn,
}

/// One launch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LaunchEntry {
    pub launch_id: String,
    /// Attempt of the rollout that started it.
    pub attempt: u32,
    /// The sandbox it ran in.
    pub sandbox: String,
    /// It continued a saved session.
    pub resumed: bool,
    /// Why it resumed or started over.
    pub reason: String,
    /// The harness's recovery tier (real harnesses only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tier: Option<RecoveryTier>,
    pub started_at_ms: u64,
    /// Unset while it runs (or is paused).
    #[serde(default)]
    pub ended_at_ms: Option<u64>,
    #[serde(default)]
    pub end: Option<LaunchEnd>,
    #[serde(default)]
    pub exit_code: Option<i32>,
    /// Checkpoints that paused it (or held it before it started).
    #[serde(default)]
    pub pauses: u32,
    /// Time spent paused, summed over its pauses.
    #[serde(default)]
    pub paused_ms: u64,
    /// Why it ended as it did, when that is not the exit code alone.
    #[serde(default)]
    pub note: Option<String>,
}

impl LaunchEntry {
    /// The entry of a launch starting at `started_at_ms`: not ended, never
    /// paused.
    pub fn started(
        launch_id: String,
        attempt: u32,
        sandbox: String,
        resumed: bool,
        reason: String,
        tier: Option<RecoveryTier>,
        started_at_ms: u64,
    ) -> Self {
        tracing::info!(
            launch = %launch_id,
            sandbox = %sandbox,
            resumed,
            reason = %reason,
            "launch started"
        );
        Self {
            launch_id,
            attempt,
            sandbox,
            resumed,
            reason,
            tier,
            started_at_ms,
            ended_at_ms: None,
            end: None,
            exit_code: None,
            pauses: 0,
            paused_ms: 0,
            note: None,
        }
    }

    /// Wall time from start to end (or to `now_ms` while it runs).
    pub fn duration_ms(&self, now_ms: u64) -> u64 {
        self.ended_at_ms
            .unwrap_or(now_ms)
            .saturating_sub(self.started_at_ms)
    }

    pub(crate) fn close(
        &mut self,
        end: LaunchEnd,
        exit_code: Option<i32>,
        at_ms: u64,
        note: Option<String>,
    ) {
        tracing::info!(
            launch = %self.launch_id,
            end = ?end,
            exit_code,
            note = note.as_deref(),
            "launch ended"
        );
        self.ended_at_ms = Some(at_ms.max(self.started_at_ms));
        self.end = Some(end);
        self.exit_code = exit_code;
        self.note = note;
    }
}

/// How the harness's own return maps to a launch end.
pub fn end_of(exit_code: Option<i32>) -> LaunchEnd {
    if exit_code == Some(0) {
        LaunchEnd::Finished
    } else {
        LaunchEnd::Failed
    }
}
