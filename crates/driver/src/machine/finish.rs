//! The end of a rollout: the verify stage, its result built from the
//! launches, the session closed (or its sandbox stopped) and the result
//! returned, or the rollout cancelled or failed by the infrastructure.

use rollpoint_owner::Verdict;

use crate::bookmark::Stage;
use crate::launchlog::LaunchEnd;
use crate::result::{Collected, InfraClass, RESULT_VERSION, RolloutResult, Status, Timings};

use super::event::{Effect, ParkKind};
use super::state::{Machine, Phase};

impl Machine {
    pub(super) fn enter_verify(&mut self, now_ms: u64) -> Vec<Effect> {
        if let Stage::Harness(p) = &self.mark.stage {
            self.mark.stage = Stage::Verify(p.clone());
        }
        if self.cancel {
            return self.cancel_now(now_ms);
        }
        if self.park && !self.restart {
            return self.park_effect(ParkKind::AtBookmark);
        }
        self.phase = Phase::Verifying;
        let mode = self
            .mark
            .progress()
            .map_or(self.setup.verify_mode, |p| p.verify_mode);
        vec![
            self.record(),
            Effect::Verify {
                session: self.session().unwrap_or_default(),
                mode,
            },
        ]
    }

    pub(super) fn build_result(
        &self,
        now_ms: u64,
        status: Status,
        verdict: Option<Verdict>,
        collected: Collected,
        error: Option<String>,
    ) -> RolloutResult {
        let launches = self
            .mark
            .progress()
            .map(|p| p.launches.clone())
            .unwrap_or_default();
        let harness_ms = launches.iter().map(|l| l.duration_ms(now_ms)).sum();
        let paused_ms = launches.iter().map(|l| l.paused_ms).sum();
        RolloutResult {
            v: RESULT_VERSION,
            task_id: self.setup.task_id.clone(),
            rollout: self.mark.rollout.clone(),
            attempt: self.mark.attempt,
            status,
            reward: verdict.as_ref().map(|v| v.reward),
            verdict,
            error,
            infra_class: None,
            infra_retries: Vec::new(),
            group: None,
            restart: self.restart,
            launches,
            usage: collected.usage,
            resources: None,
            response: collected.response,
            transcript: collected.transcript,
            timings: Timings {
                started_at_ms: self.mark.started_at_ms,
                ended_at_ms: now_ms.max(self.mark.started_at_ms),
                harness_ms,
                paused_ms,
            },
            forked_from: None,
        }
    }

    /// The rollout ends with `status`. A verdict means the owner already
    /// ended the session; otherwise the session is closed (checkpointed) or
    /// its sandbox stopped (restart) before returning.
    pub(super) fn finish(
        &mut self,
        now_ms: u64,
        status: Status,
        verdict: Option<Verdict>,
        collected: Collected,
        error: Option<String>,
    ) -> Vec<Effect> {
        let has_verdict = verdict.is_some();
        let result = self.build_result(now_ms, status, verdict, collected, error);
        self.end(result, has_verdict)
    }

    /// The infrastructure ended the rollout: status `infra_error` of `class`.
    pub(super) fn fail(&mut self, now_ms: u64, class: InfraClass, error: String) -> Vec<Effect> {
        if let Some(l) = self.open_launch_mut() {
            l.close(LaunchEnd::Failed, None, now_ms, Some(error.clone()));
        }
        let mut result = self.build_result(
            now_ms,
            Status::InfraError,
            None,
            Collected::default(),
            Some(error),
        );
        result.infra_class = Some(class);
        self.end(result, false)
    }

    pub(super) fn end(&mut self, result: RolloutResult, has_verdict: bool) -> Vec<Effect> {
        match self.session() {
            Some(session) if !has_verdict => {
                self.result = Some(result);
                self.phase = Phase::Closing;
                vec![if self.restart {
                    Effect::StopSandbox { session }
                } else {
                    Effect::CloseSession { session }
                }]
            }
            _ => self.returned(result),
        }
    }

    pub(super) fn returned(&mut self, result: RolloutResult) -> Vec<Effect> {
        self.phase = Phase::Done;
        if result.status == Status::Cancelled {
            // A cancelled rollout keeps its last bookmark: it was not
            // finished, and may be continued.
            return vec![Effect::Return(Box::new(result))];
        }
        self.mark.stage = Stage::Return(Box::new(result.clone()));
        vec![self.record(), Effect::Return(Box::new(result))]
    }

    pub(super) fn cancel_now(&mut self, now_ms: u64) -> Vec<Effect> {
        if let Some(l) = self.open_launch_mut() {
            l.close(
                LaunchEnd::Interrupted,
                None,
                now_ms,
                Some("cancelled".to_owned()),
            );
        }
        self.finish(
            now_ms,
            Status::Cancelled,
            None,
            Collected::default(),
            Some("cancelled".to_owned()),
        )
    }
}
