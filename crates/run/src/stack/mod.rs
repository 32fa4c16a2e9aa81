//! The run's participants: the local sandboxes and their owner, the drivers, the gateway
//! process (with the scripted model, if any) and the coordinator over them all, and the
//! task that parks the runs whose model calls the gateway reports stalled.
//!
//! | file | what it is for |
//! |---|---|
//! | `build` | builds the participants of the run ([`Stack`]) |
//! | [`gateway`] | the run's gateway process: started, waited for after a crash, stopped |
//! | `stalls` | parks the runs whose model calls are stalled, and lets them go |

pub(crate) mod build;
pub mod gateway;
mod stalls;

pub use build::{OWNER_DIR, Stack, open_backend, sandbox_tools};
