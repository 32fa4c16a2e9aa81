//! Follows the gateway's stalled attempts (`GET /v1/gateway/stalls`, long-polled) and parks
//! each one's run in place until its call has a reply, so a rollout whose model is away does
//! not run its own timers and tool commands on (docs/design/models.md).

use std::collections::BTreeSet;
use std::time::Duration;

use rollpoint_driver::Runs;
use rollpoint_gateway::GatewayClient;

/// How long one poll waits for a change.
const POLL: Duration = Duration::from_secs(20);
/// The wait after a failed poll (the gateway restarting, say).
const AFTER_ERROR: Duration = Duration::from_millis(500);

/// Parks and lets go the runs of `runs` as the gateway stalls and frees their attempts,
/// until the task is aborted.
pub async fn follow(client: GatewayClient, runs: Runs) {
    let mut generation = 0;
    let mut parked: BTreeSet<String> = BTreeSet::new();
    loop {
        let reply = match client.stalls(generation, POLL).await {
            Ok(r) => r,
            Err(e) => {
                tracing::debug!(error = %e, "cannot read the gateway's stalled attempts");
                tokio::time::sleep(AFTER_ERROR).await;
                continue;
            }
        };
        // A new gateway process starts its generations over.
        if reply.generation < generation {
            generation = 0;
            continue;
        }
        generation = reply.generation;
        let now: BTreeSet<String> = reply
            .stalled
            .iter()
            .map(|k| k.rollout().to_string())
            .collect();
        for rollout in now.difference(&parked) {
            tracing::info!(rollout = %rollout, "the model has not answered: parking the rollout in place");
            runs.set_stalled(rollout, true);
        }
        for rollout in parked.difference(&now) {
            tracing::info!(rollout = %rollout, "the model answered: the rollout goes on");
            runs.set_stalled(rollout, false);
        }
        parked = now;
    }
}
