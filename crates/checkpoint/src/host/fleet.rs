//! Fleet: pause or continue the participant's share of the fleet for a weight update. It
//! takes no checkpoint lock and no phase: a checkpoint may be taken while the fleet is
//! paused, and its resume leaves the fleet paused.

use super::Inner;
use super::call::{millis, within};
use crate::api::CallResult;
use crate::errors::CallError;
use crate::wire::{FleetReply, FleetRequest, Request as _};

impl Inner {
    /// Pauses or continues the participant's share of the fleet, as
    /// `req.paused` says.
    pub(super) async fn fleet(&self, req: FleetRequest) -> CallResult<FleetReply> {
        req.check()?;
        let what = if req.paused { "pause" } else { "continue" };
        within("fleet", what, millis(req.timeout_ms), async {
            let order = crate::participant::FleetOrder {
                paused: req.paused,
                calls: req.calls,
                version: req.version.clone(),
            };
            self.participant
                .fleet(order)
                .await
                .map_err(|e| CallError::hook("fleet", &e))
        })
        .await
    }
}
