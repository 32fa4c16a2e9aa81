//! The fleet paused for a weight update (`POST /v1/fleet/pause`, `/v1/fleet/continue`),
//! through the coordinator's fleet verb as `rollpoint serve coordinator` does it: the gateway
//! sends no model call while paused and every in-flight rollout is parked in place (its
//! launch frozen and confirmed, as at a checkpoint); the continue names the policy version
//! the replicas serve now, which the gateway tags every later call with and the run keeps for
//! a gateway it restarts (docs/design/models.md). The state is written before the
//! gateway is told, so a run resumed after a crash during a pause starts paused.

use rollpoint_api::error::{ApiError, ErrorCode};
use rollpoint_api::wire::{FleetReport, InFlightCalls};

use crate::files::events::Event;
use crate::run_loop::new::Loop;
use crate::stack::gateway::FleetRecord;

impl Loop {
    fn has_gateway(&self) -> Result<(), ApiError> {
        match self.stack.gateway {
            Some(_) => Ok(()),
            None => Err(ApiError::new(
                ErrorCode::Failed,
                "the run has no model gateway (no model_upstream or model_script)",
            )),
        }
    }

    pub(crate) async fn fleet_pause(
        &mut self,
        calls: Option<InFlightCalls>,
    ) -> Result<FleetReport, ApiError> {
        self.has_gateway()?;
        let calls = calls.unwrap_or(self.state.config.fleet_calls);
        let failed = |e: &dyn std::fmt::Display| ApiError::new(ErrorCode::Failed, e.to_string());
        let mut record = FleetRecord::load(&self.run_dir).map_err(|e| failed(&e))?;
        record.paused = Some(calls);
        record.save(&self.run_dir).map_err(|e| failed(&e))?;
        let report = self
            .stack
            .coordinator
            .fleet(true, calls, None)
            .await
            .map_err(|e| failed(&e))?;
        tracing::info!(
            parked = report.parked,
            going_on = report.going_on.len(),
            ?calls,
            "the fleet is paused"
        );
        self.events.record(Event::FleetPaused {
            calls,
            parked: report.parked,
            going_on: report.going_on.len(),
        });
        Ok(report)
    }

    pub(crate) async fn fleet_continue(
        &mut self,
        version: Option<String>,
    ) -> Result<FleetReport, ApiError> {
        self.has_gateway()?;
        let failed = |e: &dyn std::fmt::Display| ApiError::new(ErrorCode::Failed, e.to_string());
        let mut record = FleetRecord::load(&self.run_dir).map_err(|e| failed(&e))?;
        record.paused = None;
        if version.is_some() {
            record.version.clone_from(&version);
        }
        record.save(&self.run_dir).map_err(|e| failed(&e))?;
        let report = self
            .stack
            .coordinator
            .fleet(false, InFlightCalls::default(), version)
            .await
            .map_err(|e| failed(&e))?;
        tracing::info!(version = ?report.version, "the fleet goes on");
        self.events.record(Event::FleetContinued {
            version: report.version.clone(),
        });
        Ok(report)
    }
}
