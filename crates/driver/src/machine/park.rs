//! Parking a running harness in place: its pause confirmed (or held, failed
//! or ended first), the checkpoint opened again, the harness continued.

use crate::bookmark::Stage;
use crate::launchlog::end_of;

use super::event::{Effect, ParkKind, PauseOutcome, StopWhy};
use super::state::{Machine, Phase};

impl Machine {
    pub(super) fn on_paused(&mut self, now_ms: u64, outcome: PauseOutcome) -> Vec<Effect> {
        let Phase::Pausing { .. } = self.phase else {
            return Vec::new();
        };
        if self.cancel && !matches!(outcome, PauseOutcome::AlreadyEnded { .. }) {
            self.phase = Phase::Stopping(StopWhy::Cancel);
            return vec![Effect::Stop {
                launch_id: self.current_launch_id(),
                why: StopWhy::Cancel,
            }];
        }
        match outcome {
            PauseOutcome::Confirmed | PauseOutcome::Held => {
                if let Some(l) = self.open_launch_mut() {
                    l.pauses += 1;
                }
                self.paused_since = Some(now_ms);
                let kind = if outcome == PauseOutcome::Held {
                    ParkKind::Held
                } else {
                    ParkKind::Paused
                };
                self.park_effect(kind)
            }
            PauseOutcome::AlreadyEnded { exit_code } => {
                if let Some(l) = self.open_launch_mut() {
                    l.close(end_of(exit_code), exit_code, now_ms, None);
                }
                self.enter_verify(now_ms)
            }
            PauseOutcome::Failed { reason } => {
                self.phase = Phase::Stopping(StopWhy::PauseFailed);
                if let Some(l) = self.open_launch_mut() {
                    l.note = Some(format!("pause failed: {reason}"));
                }
                vec![Effect::Stop {
                    launch_id: self.current_launch_id(),
                    why: StopWhy::PauseFailed,
                }]
            }
        }
    }

    pub(super) fn on_open(&mut self, now_ms: u64) -> Vec<Effect> {
        self.park = false;
        let Phase::Parked(kind) = self.phase.clone() else {
            return Vec::new();
        };
        match kind {
            ParkKind::Paused | ParkKind::Held => {
                let hold = kind == ParkKind::Held;
                self.phase = Phase::Continuing { hold };
                vec![Effect::Continue {
                    launch_id: self.current_launch_id(),
                    hold,
                }]
            }
            ParkKind::Stopped | ParkKind::Blocked { .. } | ParkKind::AtBookmark => {
                match &self.mark.stage {
                    Stage::Seed => {
                        self.phase = Phase::Seeding;
                        vec![Effect::Seed]
                    }
                    Stage::Harness(_) => self.enter_harness(now_ms),
                    Stage::Verify(_) => self.enter_verify(now_ms),
                    Stage::Return(r) => {
                        let r = r.clone();
                        self.phase = Phase::Done;
                        vec![Effect::Return(r)]
                    }
                }
            }
        }
    }

    pub(super) fn on_continued(&mut self, now_ms: u64, error: Option<String>) -> Vec<Effect> {
        let Phase::Continuing { .. } = self.phase else {
            return Vec::new();
        };
        let since = self.paused_since.take().unwrap_or(now_ms);
        if let Some(l) = self.open_launch_mut() {
            l.paused_ms += now_ms.saturating_sub(since);
        }
        if let Some(reason) = error {
            if let Some(l) = self.open_launch_mut() {
                l.note = Some(format!("continue failed: {reason}"));
            }
            self.phase = Phase::Stopping(StopWhy::ContinueFailed);
            return vec![Effect::Stop {
                launch_id: self.current_launch_id(),
                why: StopWhy::ContinueFailed,
            }];
        }
        if self.cancel {
            self.phase = Phase::Stopping(StopWhy::Cancel);
            return vec![Effect::Stop {
                launch_id: self.current_launch_id(),
                why: StopWhy::Cancel,
            }];
        }
        self.phase = Phase::Waiting;
        let launch_id = self.current_launch_id();
        if self.park && !self.restart {
            // Another park came while it was being continued.
            self.park = false;
            let mut out = vec![self.record()];
            out.extend(self.on_park());
            return out;
        }
        vec![self.record(), Effect::Wait { launch_id }]
    }
}
