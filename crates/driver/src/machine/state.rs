//! One rollout's state as the machine keeps it: what it was told up front,
//! its bookmark, the phase it is in and the requests waiting for a boundary,
//! with the reads every step shares.

use crate::bookmark::{Bookmark, Progress, Stage, VerifyMode};
use crate::launchlog::LaunchEntry;
use crate::result::RolloutResult;

use super::event::{Effect, ParkKind, StopWhy};

/// What the machine is told about its rollout up front.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Setup {
    pub task_id: String,
    /// Checkpointing is on for this run (else it is a restart).
    pub checkpointing: bool,
    /// The adapter pauses its harness at checkpoints (else stop and relaunch).
    pub pauses: bool,
    pub verify_mode: VerifyMode,
}

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Phase {
    New,
    Seeding,
    Accessing,
    Deciding,
    Launching { resume: bool, reason: String },
    Waiting,
    Pausing { hold: bool },
    Parked(ParkKind),
    Continuing { hold: bool },
    Stopping(StopWhy),
    Verifying,
    Closing,
    Done,
}

/// One rollout's state.
#[derive(Debug, Clone, PartialEq)]
pub struct Machine {
    pub(super) setup: Setup,
    pub(super) mark: Bookmark,
    pub(super) restart: bool,
    pub(super) phase: Phase,
    pub(super) park: bool,
    pub(super) cancel: bool,
    pub(super) paused_since: Option<u64>,
    /// The result being returned, once known.
    pub(super) result: Option<RolloutResult>,
}

impl Machine {
    /// A machine continuing from `mark` as attempt `attempt`.
    pub fn new(setup: Setup, mut mark: Bookmark, attempt: u32) -> Self {
        mark.attempt = attempt;
        let restart = !setup.checkpointing;
        Self {
            setup,
            mark,
            restart,
            phase: Phase::New,
            park: false,
            cancel: false,
            paused_since: None,
            result: None,
        }
    }

    /// The rollout is a restart: never parked, starts over after a crash.
    pub fn restart(&self) -> bool {
        self.restart
    }

    /// Its adapter pauses its harness in place (else a park stops it).
    pub fn pauses(&self) -> bool {
        self.setup.pauses
    }

    /// A park request would change something (not a restart, not already
    /// asked, not finished).
    pub fn wants_park(&self) -> bool {
        !self.restart && !self.park && !self.done()
    }

    pub fn done(&self) -> bool {
        self.phase == Phase::Done
    }

    /// The bookmark as it would be recorded now (a restart's is its seed).
    pub fn bookmark(&self) -> Bookmark {
        if self.restart {
            Bookmark::seed(
                &self.mark.rollout,
                self.mark.attempt,
                self.mark.started_at_ms,
            )
        } else {
            self.mark.clone()
        }
    }

    /// The harness or verify progress (a restart's too).
    pub fn progress(&self) -> Option<&Progress> {
        self.mark.progress()
    }

    pub(super) fn record(&self) -> Effect {
        Effect::RecordBookmark(self.bookmark())
    }

    pub(super) fn progress_mut(&mut self) -> Option<&mut Progress> {
        match &mut self.mark.stage {
            Stage::Harness(p) | Stage::Verify(p) => Some(p),
            Stage::Seed | Stage::Return(_) => None,
        }
    }

    pub(super) fn session(&self) -> Option<String> {
        self.mark.progress().map(|p| p.session.session.clone())
    }

    fn current_launch(&self) -> Option<&LaunchEntry> {
        self.mark.progress().and_then(|p| p.launches.last())
    }

    pub(super) fn current_launch_id(&self) -> String {
        self.current_launch()
            .map(|l| l.launch_id.clone())
            .unwrap_or_default()
    }

    pub(super) fn open_launch_mut(&mut self) -> Option<&mut LaunchEntry> {
        self.progress_mut()
            .and_then(|p| p.launches.last_mut())
            .filter(|l| l.end.is_none())
    }

    pub(super) fn park_effect(&mut self, kind: ParkKind) -> Vec<Effect> {
        self.phase = Phase::Parked(kind.clone());
        vec![self.record(), Effect::Park(kind)]
    }
}
