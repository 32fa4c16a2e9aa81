//! Driving the machine to its result: bookmarks recorded before each
//! action, the action performed (or the run parked until it is opened), its
//! event fed back, and park and cancel requests passed on at boundaries.

use rollpoint_proto::clock::unix_ms;

use crate::ctl::RunStatus;
use crate::machine::event::{Effect, Event};
use crate::machine::state::Machine;
use crate::result::{InfraClass, RolloutResult};
use crate::task::RolloutTask;

use super::context::Runner;

impl Runner {
    /// Runs the machine to its result.
    pub async fn drive(mut self, mut machine: Machine) -> RolloutResult {
        let mut effects = Vec::new();
        let ctl = self.ctl.borrow().clone();
        let pauses = machine.pauses();
        if ctl.cancel {
            effects.extend(machine.step(unix_ms(), Event::CancelRequested));
        }
        if ctl.parks(pauses) && machine.wants_park() {
            effects.extend(machine.step(unix_ms(), Event::ParkRequested));
        }
        effects.extend(machine.step(unix_ms(), Event::Start));
        let mut told_cancel = ctl.cancel;
        loop {
            let mut action = None;
            for effect in effects.drain(..) {
                match effect {
                    Effect::RecordBookmark(b) => self.record(b).await,
                    other => action = Some(other),
                }
            }
            self.set_status(&machine);
            let Some(action) = action else {
                // Every step but a finished machine's yields an action.
                let mut result = machine_failed(&machine, &self.task);
                result.group.clone_from(&self.task.group);
                self.ctl.send_modify(|c| c.status = RunStatus::Done);
                return result;
            };
            let event = match action {
                Effect::Return(result) => {
                    self.ctl.send_modify(|c| c.status = RunStatus::Done);
                    return self.with_resources(*result);
                }
                Effect::Wait { launch_id } => self.wait(&machine, &launch_id).await,
                Effect::Park(kind) => {
                    self.ctl
                        .send_modify(|c| c.status = RunStatus::Parked(kind.clone()));
                    let mut rx = self.ctl.subscribe();
                    let woke = rx
                        .wait_for(|c| !c.parks(pauses) || c.cancel)
                        .await
                        .map(|c| c.cancel);
                    self.ctl.send_modify(|c| c.status = RunStatus::Running);
                    match woke {
                        Ok(true) => Event::CancelRequested,
                        _ => Event::Opened,
                    }
                }
                other => {
                    let event = self.perform(&machine, other).await;
                    // Requests that came meanwhile only set the machine's
                    // flags here: it acts on them at its next boundary.
                    let ctl = self.ctl.borrow().clone();
                    if ctl.cancel && !told_cancel {
                        told_cancel = true;
                        effects.extend(machine.step(unix_ms(), Event::CancelRequested));
                    }
                    if ctl.parks(pauses) && machine.wants_park() {
                        effects.extend(machine.step(unix_ms(), Event::ParkRequested));
                    }
                    event
                }
            };
            if event == Event::CancelRequested {
                told_cancel = true;
            }
            effects.extend(machine.step(unix_ms(), event));
        }
    }
}

/// The result of a machine that stopped without returning (a bug): failed,
/// naming it, rather than a hang.
fn machine_failed(machine: &Machine, task: &RolloutTask) -> RolloutResult {
    let mark = machine.bookmark();
    let mut result = RolloutResult::infra_error(
        &task.task.id,
        &mark.rollout,
        mark.attempt,
        InfraClass::Internal,
        format!(
            "internal: the stage machine stopped at `{}` without a result",
            mark.next().as_str()
        ),
        crate::result::Timings {
            started_at_ms: mark.started_at_ms,
            ended_at_ms: unix_ms(),
            ..Default::default()
        },
    );
    result.restart = machine.restart();
    result.launches = machine
        .progress()
        .map(|p| p.launches.clone())
        .unwrap_or_default();
    result
}
