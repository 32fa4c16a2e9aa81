//! The control state a run shares with the registry that holds it: what the
//! registry asks of the run (park, cancel, restart) and where the run says
//! it is. Both the registry (`runs`) and the run's loop (`runner`) read it.

use crate::bookmark::Bookmark;
use crate::machine::event::ParkKind;

/// Where a run is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunStatus {
    /// Waiting for a slot.
    Queued,
    Running,
    Parked(ParkKind),
    Done,
}

/// The control state one run shares with the registry.
#[derive(Debug, Clone)]
pub struct Ctl {
    pub park: bool,
    /// The model has left one of its calls unanswered past the retry budget: park it
    /// (paused in place, never stopped) until the call has a reply.
    pub stalled: bool,
    /// The fleet is paused for a weight update: park (paused in place) until it continues.
    pub fleet: bool,
    /// Its adapter pauses its harness in place (only such a run parks for the model).
    pub pauses: bool,
    pub cancel: bool,
    pub restart: bool,
    /// The launch the run waits on, while it does: what a checkpoint's
    /// batched pause freezes.
    pub waiting: Option<rollpoint_owner::SessionLaunch>,
    pub status: RunStatus,
    /// The last recorded bookmark.
    pub bookmark: Bookmark,
}

impl Ctl {
    /// Whether the run is asked to park now: for a checkpoint, or for the model when its
    /// adapter pauses in place (a harness that would be stopped just waits for its call).
    #[must_use]
    pub fn parks(&self, pauses: bool) -> bool {
        self.park || ((self.stalled || self.fleet) && pauses)
    }
}
