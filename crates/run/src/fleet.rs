//! The fleet paused for a weight update (`POST /v1/fleet/pause`, `/v1/fleet/continue`): the
//! gateway sends no model call while paused and every in-flight rollout is parked in place
//! (its launch frozen and confirmed, as at a checkpoint); the continue names the policy
//! version the replicas serve now, which the gateway tags every later call with and the run
//! keeps for a gateway it restarts (docs/design/models.md). The state is written before the
//! gateway is told, so a run resumed after a crash during a pause starts paused.

use rollpoint_api::error::{ApiError, ErrorCode};
use rollpoint_api::wire::{FleetReport, InFlightCalls, WIRE_VERSION};

use crate::controller::Loop;
use crate::events::Event;
use crate::gateway::FleetRecord;

impl Loop {
    fn gateway_client(&self) -> Result<rollpoint_gateway::GatewayClient, ApiError> {
        self.stack
            .gateway
            .as_ref()
            .map(crate::gateway::GatewayProcess::client)
            .ok_or_else(|| {
                ApiError::new(
                    ErrorCode::Failed,
                    "the run has no model gateway (no model_upstream or model_script)",
                )
            })
    }

    pub(crate) async fn fleet_pause(
        &mut self,
        calls: Option<InFlightCalls>,
    ) -> Result<FleetReport, ApiError> {
        let client = self.gateway_client()?;
        let calls = calls.unwrap_or(self.state.config.fleet_calls);
        let failed = |e: &dyn std::fmt::Display| ApiError::new(ErrorCode::Failed, e.to_string());
        let mut record = FleetRecord::load(&self.run_dir).map_err(|e| failed(&e))?;
        record.paused = Some(calls);
        record.save(&self.run_dir).map_err(|e| failed(&e))?;
        let gateway = client.fleet_pause(calls).await.map_err(|e| failed(&e))?;
        self.stack.runs.set_fleet(true);
        let going_on = self.stack.runs.fleet_parked().await;
        let parked = self.in_flight.len().saturating_sub(going_on.len());
        tracing::info!(
            parked,
            going_on = going_on.len(),
            ?calls,
            "the fleet is paused"
        );
        self.events.record(Event::FleetPaused {
            calls,
            parked,
            going_on: going_on.len(),
        });
        Ok(FleetReport {
            v: WIRE_VERSION,
            paused: true,
            calls: Some(calls),
            version: gateway.version,
            parked,
            going_on,
        })
    }

    pub(crate) async fn fleet_continue(
        &mut self,
        version: Option<String>,
    ) -> Result<FleetReport, ApiError> {
        let client = self.gateway_client()?;
        let failed = |e: &dyn std::fmt::Display| ApiError::new(ErrorCode::Failed, e.to_string());
        let mut record = FleetRecord::load(&self.run_dir).map_err(|e| failed(&e))?;
        record.paused = None;
        if version.is_some() {
            record.version.clone_from(&version);
        }
        record.save(&self.run_dir).map_err(|e| failed(&e))?;
        let gateway = client
            .fleet_continue(version.clone())
            .await
            .map_err(|e| failed(&e))?;
        self.stack.runs.set_fleet(false);
        tracing::info!(version = ?gateway.version, "the fleet goes on");
        self.events.record(Event::FleetContinued {
            version: gateway.version.clone(),
        });
        Ok(FleetReport {
            v: WIRE_VERSION,
            paused: false,
            calls: None,
            version: gateway.version,
            parked: 0,
            going_on: Vec::new(),
        })
    }
}
