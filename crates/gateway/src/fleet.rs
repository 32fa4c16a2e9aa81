//! The policy version the gateway tags calls with, and the fleet's pause for a weight update.
//!
//! A trainer announces the version of the weights its replicas serve (at a fleet continue,
//! or at the gateway's start); each call records the version it was sent under, unless the
//! upstream names its own in an `X-Policy-Version` reply header. While the fleet is paused no
//! call is sent upstream: new calls wait, and calls already generating either finish (and keep
//! the version they were sent under) or, with [`InFlightCalls::Abort`], are dropped upstream
//! before their reply's first byte and sent again once the fleet continues, under the new
//! version. A reply that has started reaching its harness is never cut.

use tokio::sync::watch;

pub use rollpoint_api::wire::InFlightCalls;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct State {
    version: Option<String>,
    paused: Option<InFlightCalls>,
}

/// The fleet's state; every change wakes the calls waiting on it.
#[derive(Debug)]
pub(crate) struct Fleet {
    state: watch::Sender<State>,
}

impl Fleet {
    pub(crate) fn new(version: Option<String>, paused: Option<InFlightCalls>) -> Self {
        Self {
            state: watch::Sender::new(State { version, paused }),
        }
    }

    /// The version last announced.
    pub(crate) fn version(&self) -> Option<String> {
        self.state.borrow().version.clone()
    }

    /// Whether the fleet is paused, and how.
    pub(crate) fn paused(&self) -> Option<InFlightCalls> {
        self.state.borrow().paused
    }

    pub(crate) fn pause(&self, calls: InFlightCalls) {
        self.state.send_modify(|s| s.paused = Some(calls));
    }

    /// Continues the fleet, under `version` when one is given.
    pub(crate) fn resume(&self, version: Option<String>) {
        self.state.send_modify(|s| {
            s.paused = None;
            if version.is_some() {
                s.version = version;
            }
        });
    }

    /// Resolves once the fleet is not paused.
    pub(crate) async fn running(&self) {
        let mut rx = self.state.subscribe();
        let _ = rx.wait_for(|s| s.paused.is_none()).await;
    }

    /// Resolves once the fleet is paused with [`InFlightCalls::Abort`].
    pub(crate) async fn aborting(&self) {
        let mut rx = self.state.subscribe();
        let _ = rx
            .wait_for(|s| s.paused == Some(InFlightCalls::Abort))
            .await;
    }
}

/// The fleet as the gateway sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FleetState {
    pub paused: bool,
    /// While paused: what calls generating at the pause do.
    pub calls: Option<InFlightCalls>,
    /// The policy version calls are tagged with.
    pub version: Option<String>,
    /// Calls sent (or held before sending) whose reply is not yet recorded.
    pub recording: usize,
}
