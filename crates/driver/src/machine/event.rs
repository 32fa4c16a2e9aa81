//! What the runner tells the machine (events) and what the machine asks of
//! the runner (effects).

use std::collections::BTreeMap;

use rollpoint_owner::Verdict;

use crate::bookmark::{Bookmark, VerifyMode};
use crate::launchlog::RecoveryTier;
use crate::result::{Collected, RolloutResult};

/// Something that happened.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// The run starts (or continues) from its bookmark.
    Start,
    Seeded {
        session: String,
        sandbox: String,
        workdir: String,
        capturable: bool,
        cookies: BTreeMap<String, String>,
        /// The adapter's `new_state` for this session.
        state: serde_json::Value,
    },
    Accessed {
        sandbox: String,
        workdir: String,
    },
    Decided {
        resume: bool,
        reason: String,
    },
    Launched {
        launch_id: String,
        /// The adapter's recovery tier, for the launch log.
        tier: Option<RecoveryTier>,
    },
    /// The harness returned on its own.
    Ended {
        exit_code: Option<i32>,
    },
    /// The harness of this launch could not be started (its binary or an
    /// input file is missing): the launch is logged as failed, naming why,
    /// and the rollout fails without grading.
    StartFailed {
        launch_id: String,
        /// The supervisor's exit code for it, when it got that far.
        exit_code: Option<i32>,
        /// What is missing or why the start failed.
        error: String,
        /// The adapter's recovery tier, for a launch not yet logged.
        tier: Option<RecoveryTier>,
    },
    /// The launch ran past the task's time limit.
    TimedOut,
    Paused(PauseOutcome),
    Continued {
        /// Set when the paused launch could not be continued.
        error: Option<String>,
    },
    Stopped {
        /// The harness had returned before the stop reached it.
        ended_on_its_own: bool,
        exit_code: Option<i32>,
        /// Nothing of the launch is left running.
        confirmed: bool,
        reason: Option<String>,
    },
    /// Graded (`verdict` unset when the task asks for no grading).
    Verified {
        verdict: Option<Verdict>,
        collected: Collected,
    },
    /// The action in flight failed; the infrastructure ends the rollout
    /// without a verdict.
    Failed {
        class: crate::result::InfraClass,
        error: String,
    },
    Closed {
        error: Option<String>,
    },
    ParkRequested,
    /// The checkpoint opened.
    Opened,
    CancelRequested,
}

/// How a pause went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PauseOutcome {
    /// Every process of the launch is frozen, confirmed.
    Confirmed,
    /// The launch had not started: the pause file holds it.
    Held,
    /// The harness had already returned: its result stands.
    AlreadyEnded { exit_code: Option<i32> },
    /// Not confirmed (and undone by the supervisor).
    Failed { reason: String },
}

/// Why a launch is stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopWhy {
    /// A park, for an adapter that does not pause.
    Park,
    /// A park whose pause could not be confirmed.
    PauseFailed,
    /// A paused launch that could not be continued.
    ContinueFailed,
    Cancel,
    /// Past the task's harness time limit.
    TimedOut,
}

impl StopWhy {
    pub fn note(self) -> &'static str {
        match self {
            Self::Park => "stopped for a checkpoint (the adapter does not pause)",
            Self::PauseFailed => "stopped for a checkpoint (the pause was not confirmed)",
            Self::ContinueFailed => "stopped (the paused launch could not be continued)",
            Self::Cancel => "cancelled",
            Self::TimedOut => "stopped: past the task's harness time limit",
        }
    }
}

/// How a parked run is held.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParkKind {
    /// Its launch is paused in place.
    Paused,
    /// Its launch had not started: the pause file holds it.
    Held,
    /// Its launch was stopped; it relaunches when the checkpoint opens.
    Stopped,
    /// Stopped, but the stop was not confirmed: something may still run.
    Blocked { reason: String },
    /// No launch is running: it waits at its bookmark.
    AtBookmark,
}

/// Something for the runner to do.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    /// Record this bookmark durably before the next effect.
    RecordBookmark(Bookmark),
    /// Ask the owner for a session. Answered by `Seeded` or `Failed`.
    Seed,
    /// Ask the owner which sandbox is current. `Accessed` or `Failed`.
    Access { session: String },
    /// Ask the adapter whether to resume. `Decided` or `Failed`.
    ResumeDecision { session: String },
    /// Prepare and start a launch. `Launched`, `StartFailed` or `Failed`.
    Launch {
        session: String,
        launch_id: String,
        resume: bool,
    },
    /// Wait for the launch to end. `Ended` (`StartFailed` when its harness
    /// never started), or a park or cancel request.
    Wait { launch_id: String },
    /// Pause the launch (with `hold`, write the pause file first).
    /// `Paused`.
    Pause { launch_id: String, hold: bool },
    /// Continue the paused launch (with `hold`, remove the pause file).
    /// `Continued`.
    Continue { launch_id: String, hold: bool },
    /// Stop the launch. `Stopped`.
    Stop { launch_id: String, why: StopWhy },
    /// Parked: report it and wait for the checkpoint to open. `Opened`
    /// (or `CancelRequested`).
    Park(ParkKind),
    /// Collect from the adapter, then grade. `Verified` or `Failed`.
    Verify { session: String, mode: VerifyMode },
    /// Close the session through the owner. `Closed`.
    CloseSession { session: String },
    /// Stop the sandbox (a restart's). `Closed`.
    StopSandbox { session: String },
    /// The rollout is over.
    Return(Box<RolloutResult>),
}

impl Effect {
    /// Effects that change something outside the driver.
    pub fn has_side_effects(&self) -> bool {
        matches!(
            self,
            Self::Seed
                | Self::Launch { .. }
                | Self::Pause { .. }
                | Self::Continue { .. }
                | Self::Stop { .. }
                | Self::Verify { .. }
                | Self::CloseSession { .. }
                | Self::StopSandbox { .. }
        )
    }
}
