//! The stage machine, as pure code: `step(now, event)` updates the state and
//! returns the effects to carry out, in order. Nothing here does I/O, waits
//! or reads a clock, so every path (crashes after any effect included) is
//! tested by feeding events.
//!
//! Contract with the runner: the effects of one step are zero or more
//! [`Effect::RecordBookmark`] followed by at most one action. The runner
//! records each bookmark durably before it performs the action, then feeds
//! back the action's event. [`Event::ParkRequested`] and
//! [`Event::CancelRequested`] may arrive between any two steps; while an
//! action is in flight they only set a flag, acted on at the next boundary.
//!
//! The machine's state is `state`; each kind of step is a file: `step`
//! (dispatch, start, park and cancel requests), `launch` (the harness
//! stage), `park` (pause and continue), `stop`, `finish` (verify, close,
//! return).

pub(crate) mod event;
mod finish;
mod launch;
mod park;
pub(crate) mod state;
mod step;
mod stop;

pub use event::{Effect, Event, ParkKind, PauseOutcome, StopWhy};
pub use state::{Machine, Setup};
