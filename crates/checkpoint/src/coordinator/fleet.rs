//! Fleet: the whole fleet paused for a weight update, or continued under a new policy
//! version. A pause reaches the model first (no call goes upstream from then on), then the
//! agents (their runs parked in place); a continue reaches the model first too (later calls
//! carry the new version), then the agents.

use futures_util::future::join_all;

use super::{Coordinator, several};
use crate::errors::CoordinatorError;
use crate::participant::Kind;
use crate::wire::{FleetReply, FleetRequest};

impl Coordinator {
    /// Pauses (`paused`) or continues the fleet: the report of `POST /v1/fleet/pause` and
    /// `/continue`, the agents' shares summed, the model's version.
    pub async fn fleet(
        &self,
        paused: bool,
        calls: rollpoint_api::wire::InFlightCalls,
        version: Option<String>,
    ) -> Result<rollpoint_api::wire::FleetReport, CoordinatorError> {
        let timeout = self.config.timeout;
        let req = FleetRequest {
            paused,
            calls,
            version,
            timeout_ms: self.timeout_ms(timeout),
        };
        let models = self.peers.iter().filter(|p| p.kind == Kind::Model);
        let others = self.peers.iter().filter(|p| p.kind != Kind::Model);
        let mut total = FleetReply::default();
        let mut failures = Vec::new();
        for group in [models.collect::<Vec<_>>(), others.collect()] {
            let replies =
                join_all(group.iter().map(|peer| {
                    Self::call(peer, "fleet", timeout, peer.control.fleet(req.clone()))
                }))
                .await;
            for reply in replies {
                match reply {
                    Ok(r) => {
                        total.parked += r.parked;
                        total.going_on.extend(r.going_on);
                        if r.version.is_some() {
                            total.version = r.version;
                        }
                    }
                    Err(e) => failures.push(e),
                }
            }
        }
        if failures.is_empty() {
            Ok(rollpoint_api::wire::FleetReport {
                v: rollpoint_api::wire::WIRE_VERSION,
                paused,
                calls: paused.then_some(calls),
                version: total.version,
                parked: total.parked,
                going_on: total.going_on,
            })
        } else {
            let what = if paused { "pause" } else { "continue" };
            Err(several("fleet", what, failures))
        }
    }
}
