//! The harness stage: which sandbox is current, resume or start over, the
//! launch, and a launch whose harness never started.

use crate::bookmark::Stage;
use crate::launchlog::{LaunchEnd, LaunchEntry, RecoveryTier};
use crate::result::InfraClass;

use super::event::{Effect, ParkKind, StopWhy};
use super::state::{Machine, Phase};

impl Machine {
    /// Entering the harness stage: record, then ask which sandbox is
    /// current, unless a park or cancel holds it here.
    pub(super) fn enter_harness(&mut self, now_ms: u64) -> Vec<Effect> {
        if let Stage::Verify(p) = &self.mark.stage {
            self.mark.stage = Stage::Harness(p.clone());
        }
        if self.cancel {
            return self.cancel_now(now_ms);
        }
        if self.park && !self.restart {
            return self.park_effect(ParkKind::AtBookmark);
        }
        self.phase = Phase::Accessing;
        vec![
            self.record(),
            Effect::Access {
                session: self.session().unwrap_or_default(),
            },
        ]
    }

    pub(super) fn decided(&mut self, now_ms: u64, resume: bool, reason: String) -> Vec<Effect> {
        if self.cancel {
            return self.cancel_now(now_ms);
        }
        if self.park && !self.restart {
            // Not launched yet: park here and ask again after the open.
            return self.park_effect(ParkKind::AtBookmark);
        }
        let n = self.mark.progress().map_or(0, |p| p.launches.len());
        let launch_id = rollpoint_proto::key::launch_id(&self.mark.rollout, self.mark.attempt, n);
        self.phase = Phase::Launching {
            resume,
            reason: reason.clone(),
        };
        vec![Effect::Launch {
            session: self.session().unwrap_or_default(),
            launch_id,
            resume,
        }]
    }

    pub(super) fn on_launched(
        &mut self,
        now_ms: u64,
        launch_id: String,
        tier: Option<RecoveryTier>,
    ) -> Vec<Effect> {
        let Phase::Launching { resume, reason } = self.phase.clone() else {
            return Vec::new();
        };
        let entry = self.started(launch_id.clone(), resume, reason, tier, now_ms);
        if let Some(p) = self.progress_mut() {
            p.launches.extend(entry);
            // From now on there may be a saved session to continue.
            p.resume = true;
        }
        let record = self.record();
        if self.cancel {
            self.phase = Phase::Stopping(StopWhy::Cancel);
            return vec![
                record,
                Effect::Stop {
                    launch_id,
                    why: StopWhy::Cancel,
                },
            ];
        }
        if self.park && !self.restart {
            // Parked while the launch was being started: hold it with the
            // pause file (or pause it, if it already runs).
            self.phase = Phase::Pausing { hold: true };
            return vec![
                record,
                Effect::Pause {
                    launch_id,
                    hold: true,
                },
            ];
        }
        self.phase = Phase::Waiting;
        vec![record, Effect::Wait { launch_id }]
    }

    /// The launch's harness never started: the launch is logged as failed
    /// with why (a new entry when it failed before it was logged), and the
    /// rollout fails without grading, since nothing ran.
    pub(super) fn on_start_failed(
        &mut self,
        now_ms: u64,
        launch_id: String,
        exit_code: Option<i32>,
        error: String,
        tier: Option<RecoveryTier>,
    ) -> Vec<Effect> {
        let note = format!("not started: {error}");
        match self.phase.clone() {
            Phase::Launching { resume, reason } => {
                let entry = self
                    .started(launch_id.clone(), resume, reason, tier, now_ms)
                    .map(|mut entry| {
                        entry.close(LaunchEnd::Failed, exit_code, now_ms, Some(note));
                        entry
                    });
                if let Some(p) = self.progress_mut() {
                    p.launches.extend(entry);
                }
            }
            Phase::Waiting | Phase::Pausing { .. } => {
                if self.current_launch_id() != launch_id {
                    return Vec::new();
                }
                if let Some(l) = self.open_launch_mut() {
                    l.close(LaunchEnd::Failed, exit_code, now_ms, Some(note));
                }
            }
            _ => return Vec::new(),
        }
        if self.cancel {
            return self.cancel_now(now_ms);
        }
        self.fail(
            now_ms,
            InfraClass::LaunchFailed,
            format!("launch {launch_id}: {error}"),
        )
    }

    /// The log entry of launch `launch_id` of this attempt, started now in
    /// the current sandbox (none before the harness stage).
    fn started(
        &self,
        launch_id: String,
        resume: bool,
        reason: String,
        tier: Option<RecoveryTier>,
        now_ms: u64,
    ) -> Option<LaunchEntry> {
        self.mark.progress().map(|p| {
            LaunchEntry::started(
                launch_id,
                self.mark.attempt,
                p.session.sandbox.clone(),
                resume,
                reason,
                tier,
                now_ms,
            )
        })
    }
}
