//! Grading: once every launch's supervisor has stopped what the harness
//! left, the sandbox's usage read, a model left unanswered failed, what the
//! harness left collected, and the owner asked for the verdict.

use std::time::Duration;

use crate::bookmark::VerifyMode;
use crate::machine::event::Event;
use crate::machine::state::Machine;
use crate::result::InfraClass;

use super::context::Runner;

/// How long grading waits for a launch's supervisor to have stopped what
/// the harness left behind.
const CLEANUP_WAIT: Duration = Duration::from_secs(30);

impl Runner {
    /// Grades the session once nothing the harness left runs on: what the
    /// harness left is collected first, as evidence, not the grade.
    pub(super) async fn verify(
        &mut self,
        machine: &Machine,
        session: &str,
        mode: VerifyMode,
    ) -> Event {
        let rollout = self.task.rollout().to_owned();
        // Nothing the harness left may run on into grading (a loop
        // rewriting the reward file): its supervisor exits only once
        // it has stopped all of it.
        for (launch_id, dir) in &self.launches {
            if !dir.wait_exited(CLEANUP_WAIT).await {
                return Event::Failed {
                    class: InfraClass::SandboxLost,
                    error: format!(
                        "launch {launch_id}: its supervisor did not exit within {} s of \
                         the harness's end, so what the harness left is not known to be \
                         stopped; not graded",
                        CLEANUP_WAIT.as_secs()
                    ),
                };
            }
        }
        self.read_usage(session).await;
        if let Some(health) = &self.model_health
            && let Some(why) = health
                .last_call_unanswered(&rollout, machine.bookmark().attempt)
                .await
        {
            return Event::Failed {
                class: InfraClass::ModelUnreachable,
                error: format!("the harness ended with its model unanswered: {why}"),
            };
        }
        let cx = self.cx(machine);
        let state = Self::state(machine);
        // Usage and the answer are evidence, not the grade: a
        // harness that left none still gets graded.
        let collected = self.adapter.collect(&cx, &state).await.unwrap_or_default();
        match mode {
            VerifyMode::Skip => Event::Verified {
                verdict: None,
                collected,
            },
            VerifyMode::Owner => match self.owner.verify(session).await {
                Ok(v) => Event::Verified {
                    verdict: Some(v),
                    collected,
                },
                Err(e) => Event::Failed {
                    // Grading that could not be done where the task asks
                    // (no shell to empty its directories) is the setup's fault.
                    class: if e.kind() == "unprocessable" {
                        InfraClass::SetupFailed
                    } else {
                        InfraClass::SandboxLost
                    },
                    error: format!("verify: {e}"),
                },
            },
        }
    }
}
