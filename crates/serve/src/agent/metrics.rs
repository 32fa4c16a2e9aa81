//! `GET /metrics` on the agent (behind its token): `rollpoint_agent_rollouts{state}`, the
//! rollouts known here by state (`queued`, `running`, `parked`, `done`, `lost`, `retired`),
//! counted at each scrape.

use std::sync::Arc;

use axum::extract::State;
use axum::response::Response;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::Shared;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabel {
    state: String,
}

pub(super) async fn handle(State(shared): State<Arc<Shared>>) -> Response {
    let rollouts = Family::<StateLabel, Gauge>::default();
    for (rollout, seen) in shared.table.list() {
        let state = serde_json::to_value(shared.status(&rollout, &seen).state)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default();
        rollouts.get_or_create(&StateLabel { state }).inc();
    }
    let mut registry = Registry::with_prefix("rollpoint_agent");
    rollpoint_api::process_metrics::register_process(&mut registry);
    registry.register("rollouts", "Rollouts known here by state", rollouts);
    shared.runs.pause_metrics().register(&mut registry);
    rollpoint_api::metrics::reply(&registry)
}
