//! One step: an event dispatched to what handles it, and the three events
//! that may come at any boundary (start, a park request, a cancel).

use crate::bookmark::{Progress, SessionHint, Stage};
use crate::launchlog::{LaunchEnd, end_of};
use crate::result::Status;

use super::event::{Effect, Event, ParkKind, StopWhy};
use super::state::{Machine, Phase};

impl Machine {
    /// Carries out one event; returns the effects, in order.
    pub fn step(&mut self, now_ms: u64, event: Event) -> Vec<Effect> {
        if self.phase == Phase::Done {
            return Vec::new();
        }
        match event {
            Event::ParkRequested => self.on_park(),
            Event::CancelRequested => self.on_cancel(now_ms),
            Event::Start => self.on_start(now_ms),
            Event::Seeded {
                session,
                sandbox,
                workdir,
                capturable,
                cookies,
                state,
            } => {
                self.restart = self.restart || !capturable;
                self.mark.stage = Stage::Harness(Progress {
                    session: SessionHint {
                        session,
                        sandbox,
                        workdir,
                    },
                    cookies,
                    verify_mode: self.setup.verify_mode,
                    state,
                    resume: false,
                    launches: Vec::new(),
                });
                self.enter_harness(now_ms)
            }
            Event::Accessed { sandbox, workdir } => {
                if let Some(p) = self.progress_mut() {
                    p.session.sandbox = sandbox;
                    p.session.workdir = workdir;
                }
                if self.cancel {
                    return self.cancel_now(now_ms);
                }
                let resume = self.mark.progress().is_some_and(|p| p.resume);
                if resume {
                    self.phase = Phase::Deciding;
                    vec![Effect::ResumeDecision {
                        session: self.session().unwrap_or_default(),
                    }]
                } else {
                    self.decided(now_ms, false, "first launch of the rollout".to_owned())
                }
            }
            Event::Decided { resume, reason } => self.decided(now_ms, resume, reason),
            Event::Launched { launch_id, tier } => self.on_launched(now_ms, launch_id, tier),
            Event::Ended { exit_code } => {
                if let Some(l) = self.open_launch_mut() {
                    l.close(end_of(exit_code), exit_code, now_ms, None);
                }
                self.enter_verify(now_ms)
            }
            Event::StartFailed {
                launch_id,
                exit_code,
                error,
                tier,
            } => self.on_start_failed(now_ms, launch_id, exit_code, error, tier),
            Event::TimedOut => {
                if self.phase != Phase::Waiting {
                    return Vec::new();
                }
                self.phase = Phase::Stopping(StopWhy::TimedOut);
                vec![Effect::Stop {
                    launch_id: self.current_launch_id(),
                    why: StopWhy::TimedOut,
                }]
            }
            Event::Paused(outcome) => self.on_paused(now_ms, outcome),
            Event::Opened => self.on_open(now_ms),
            Event::Continued { error } => self.on_continued(now_ms, error),
            Event::Stopped {
                ended_on_its_own,
                exit_code,
                confirmed,
                reason,
            } => self.on_stopped(now_ms, ended_on_its_own, exit_code, confirmed, reason),
            Event::Verified { verdict, collected } => {
                let status = if verdict.is_some() {
                    Status::Verified
                } else {
                    Status::Unverified
                };
                self.finish(now_ms, status, verdict, collected, None)
            }
            Event::Failed { class, error } => self.fail(now_ms, class, error),
            Event::Closed { error } => {
                let Some(mut result) = self.result.take() else {
                    return Vec::new();
                };
                if let Some(e) = error {
                    result.error = Some(match result.error.take() {
                        Some(first) => format!("{first}; then closing the session: {e}"),
                        None => format!("closing the session: {e}"),
                    });
                }
                self.returned(result)
            }
        }
    }

    pub(super) fn on_start(&mut self, now_ms: u64) -> Vec<Effect> {
        if self.phase != Phase::New {
            return Vec::new();
        }
        match self.mark.stage.clone() {
            Stage::Seed => {
                if self.park && !self.restart {
                    return self.park_effect(ParkKind::AtBookmark);
                }
                if self.cancel {
                    return self.cancel_now(now_ms);
                }
                self.phase = Phase::Seeding;
                vec![self.record(), Effect::Seed]
            }
            Stage::Harness(_) => {
                let attempt = self.mark.attempt;
                if let Some(l) = self.open_launch_mut() {
                    l.close(
                        LaunchEnd::Interrupted,
                        None,
                        now_ms,
                        Some(format!(
                            "its attempt ended before it did; attempt {attempt} continues"
                        )),
                    );
                }
                self.enter_harness(now_ms)
            }
            Stage::Verify(_) => self.enter_verify(now_ms),
            Stage::Return(result) => {
                self.phase = Phase::Done;
                vec![Effect::Return(result)]
            }
        }
    }

    pub(super) fn on_park(&mut self) -> Vec<Effect> {
        if self.restart || self.park {
            return Vec::new();
        }
        self.park = true;
        if self.phase != Phase::Waiting {
            return Vec::new();
        }
        let launch_id = self.current_launch_id();
        if self.setup.pauses {
            self.phase = Phase::Pausing { hold: false };
            vec![Effect::Pause {
                launch_id,
                hold: false,
            }]
        } else {
            self.phase = Phase::Stopping(StopWhy::Park);
            vec![Effect::Stop {
                launch_id,
                why: StopWhy::Park,
            }]
        }
    }

    pub(super) fn on_cancel(&mut self, now_ms: u64) -> Vec<Effect> {
        if self.cancel {
            return Vec::new();
        }
        self.cancel = true;
        match &self.phase {
            Phase::Waiting | Phase::Parked(ParkKind::Paused) | Phase::Parked(ParkKind::Held) => {
                self.phase = Phase::Stopping(StopWhy::Cancel);
                vec![Effect::Stop {
                    launch_id: self.current_launch_id(),
                    why: StopWhy::Cancel,
                }]
            }
            Phase::New | Phase::Parked(_) => self.cancel_now(now_ms),
            _ => Vec::new(),
        }
    }
}
