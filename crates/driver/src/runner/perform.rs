//! Performing one action of the machine and answering with its event:
//! seeding, access, the resume decision and closing here; launch, pause,
//! continue, stop and verify each in a file of its own.

use rollpoint_owner::OwnerTask;
use rollpoint_proto::key::AttemptKey;

use crate::machine::event::{Effect, Event};
use crate::machine::state::Machine;
use crate::result::InfraClass;

use super::context::Runner;
use super::env::capture_key;

impl Runner {
    pub(super) async fn perform(&mut self, machine: &Machine, effect: Effect) -> Event {
        let rollout = self.task.rollout().to_owned();
        match effect {
            Effect::Seed => match capture_key(&rollout, machine.bookmark().attempt) {
                Err(e) => Event::Failed {
                    class: InfraClass::Internal,
                    error: format!("seed: {e}"),
                },
                Ok(key) => self.seed(key, &rollout).await,
            },
            Effect::Access { session } => match self.owner.access(&session).await {
                Ok(a) => Event::Accessed {
                    sandbox: a.sandbox,
                    workdir: a.workdir,
                },
                Err(e) => Event::Failed {
                    class: InfraClass::RestoreFailed,
                    error: format!("access: {e}"),
                },
            },
            Effect::ResumeDecision { .. } => {
                let cx = self.cx(machine);
                let state = Self::state(machine);
                match self.adapter.resume_decision(&cx, &state).await {
                    Ok(d) => Event::Decided {
                        resume: d.resume,
                        reason: d.reason,
                    },
                    Err(e) => Event::Failed {
                        class: InfraClass::RestoreFailed,
                        error: format!("resume decision: {e}"),
                    },
                }
            }
            Effect::Launch {
                session,
                launch_id,
                resume,
            } => self.launch(machine, &session, launch_id, resume).await,
            Effect::Pause { launch_id, hold } => self.pause(&launch_id, hold).await,
            Effect::Continue { launch_id, hold } => self.continue_launch(&launch_id, hold).await,
            Effect::Stop { launch_id, why } => self.stop(&launch_id, why).await,
            Effect::Verify { session, mode } => self.verify(machine, &session, mode).await,
            Effect::CloseSession { session } | Effect::StopSandbox { session } => {
                self.read_usage(&session).await;
                Event::Closed {
                    error: self
                        .owner
                        .close(&session)
                        .await
                        .err()
                        .map(|e| e.to_string()),
                }
            }
            Effect::RecordBookmark(_)
            | Effect::Wait { .. }
            | Effect::Park(_)
            | Effect::Return(_) => Event::Failed {
                class: InfraClass::Internal,
                error: "internal: effect performed out of place".to_owned(),
            },
        }
    }

    /// Seeds this attempt's session. Its owner task id is the attempt key,
    /// so the owner's checkpoint participant finds sessions by it.
    pub(super) async fn seed(&self, key: AttemptKey, rollout: &str) -> Event {
        match self
            .owner
            .create_session(OwnerTask {
                id: key.to_string(),
                ..self.task.task.clone()
            })
            .await
        {
            Ok(info) => Event::Seeded {
                state: self.adapter.new_state(&info.workdir, rollout),
                session: info.session,
                sandbox: info.sandbox,
                workdir: info.workdir,
                capturable: info.capturable,
                cookies: Default::default(),
            },
            Err(e) => Event::Failed {
                class: InfraClass::SetupFailed,
                error: format!("seed: {e}"),
            },
        }
    }
}
