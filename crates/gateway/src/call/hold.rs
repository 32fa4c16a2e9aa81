//! Stage 3, hold: what keeps an admitted call from going upstream now. A paused fleet (a
//! weight update) holds every call until it continues, and may drop a call whose reply has
//! not started so it is sent again under the new weights; an attempt whose model has been
//! away past the retry budget is reported stalled, so its launch is paused in place
//! (`crate::stalls`); an attempt given up after the outage bound sends nothing more.

use std::time::{Duration, Instant};

use crate::ledger::CallId;
use crate::shared::Shared;
use crate::stalls::Stall;

/// How often a call held by a paused fleet looks whether the gateway is closing.
const CLOSED_POLL: Duration = Duration::from_millis(250);

/// Waits while the fleet is paused and returns how long it waited (time that is no
/// outage); the reason the call goes nowhere once the gateway closes for good.
pub(crate) async fn fleet(shared: &Shared, id: &CallId) -> Result<Duration, String> {
    let began = Instant::now();
    while shared.fleet.paused().is_some() {
        if shared.is_closed() {
            return Err(format!(
                "call {id}: the gateway closed while the fleet was paused"
            ));
        }
        tokio::select! {
            () = shared.fleet.running() => {}
            () = tokio::time::sleep(CLOSED_POLL) => {}
        }
    }
    Ok(began.elapsed())
}

/// `sending`, or `None` once a fleet pause asks to drop calls whose reply has not started.
pub(crate) async fn unless_dropped<T>(
    shared: &Shared,
    sending: impl std::future::Future<Output = T>,
) -> Option<T> {
    tokio::select! {
        out = sending => Some(out),
        () = shared.fleet.aborting() => None,
    }
}

/// Whether an earlier call of the attempt outlasted the outage bound.
pub(crate) fn given_up(shared: &Shared, id: &CallId) -> bool {
    shared.stalls.is_given_up(&id.key)
}

/// Gives the attempt up: this call and every later one end unanswered.
pub(crate) fn give_up(shared: &Shared, id: &CallId) {
    shared.stalls.give_up(&id.key);
}

/// Reports the call's attempt stalled until the returned guard is dropped.
pub(crate) fn stall(shared: &Shared, id: &CallId) -> Stall {
    shared.stalls.stall(&id.key)
}
