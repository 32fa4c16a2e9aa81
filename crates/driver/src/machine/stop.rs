//! A stopped launch: ended on its own, timed out, or stopped for a park, a
//! cancel or a failed pause or continue, and where the rollout goes next.

use crate::launchlog::{LaunchEnd, end_of};

use super::event::{Effect, ParkKind, StopWhy};
use super::state::{Machine, Phase};

impl Machine {
    pub(super) fn on_stopped(
        &mut self,
        now_ms: u64,
        ended_on_its_own: bool,
        exit_code: Option<i32>,
        confirmed: bool,
        reason: Option<String>,
    ) -> Vec<Effect> {
        let Phase::Stopping(why) = self.phase.clone() else {
            return Vec::new();
        };
        if let Some(since) = self.paused_since.take()
            && let Some(l) = self.open_launch_mut()
        {
            l.paused_ms += now_ms.saturating_sub(since);
        }
        if ended_on_its_own {
            // It returned before the stop: its result stands.
            if let Some(l) = self.open_launch_mut() {
                l.close(end_of(exit_code), exit_code, now_ms, None);
            }
            if why == StopWhy::Cancel {
                return self.cancel_now(now_ms);
            }
            return self.enter_verify(now_ms);
        }
        if why == StopWhy::TimedOut {
            // A failed launch: grade what it left.
            if let Some(l) = self.open_launch_mut() {
                l.close(
                    LaunchEnd::Failed,
                    exit_code,
                    now_ms,
                    Some(why.note().to_owned()),
                );
            }
            if self.cancel {
                return self.cancel_now(now_ms);
            }
            return self.enter_verify(now_ms);
        }
        if let Some(l) = self.open_launch_mut() {
            let mut note = why.note().to_owned();
            if let Some(earlier) = l.note.take() {
                note = format!("{earlier}; {note}");
            }
            if let Some(r) = &reason {
                note = format!("{note}; {r}");
            }
            l.close(LaunchEnd::Interrupted, exit_code, now_ms, Some(note));
        }
        if why == StopWhy::Cancel || self.cancel {
            return self.cancel_now(now_ms);
        }
        if let Some(p) = self.progress_mut() {
            p.resume = true;
        }
        if self.park && !self.restart {
            let kind = if confirmed {
                ParkKind::Stopped
            } else {
                ParkKind::Blocked {
                    reason: reason.unwrap_or_else(|| "the stop was not confirmed".to_owned()),
                }
            };
            return self.park_effect(kind);
        }
        self.enter_harness(now_ms)
    }
}
