//! `rollpoint resume`: after any crash, sweep what the crashed process left,
//! decide per task what to do ([`plan`]), restore the newest intact
//! checkpoint's attempts (or the one asked for) as their next attempts, start
//! the rest over, and drive the loop to the end; and `rollpoint resume --from`,
//! the same on a machine that has nothing of the run.
//!
//! | file | step |
//! |---|---|
//! | `steps` | the resume, one call per step |
//! | `read` | the run directory locked, its state and tasks read and checked |
//! | `source` | the checkpoint to restore from: the store's fetched, the newest intact chosen |
//! | `sweep` | the crashed run's sandboxes and unretained snapshots removed |
//! | [`plan`] | what to do with each rollout (pure) |
//! | `decide` | the plan, with attempts whose sessions were not saved started over |
//! | `build` | the stack built and the loop made |
//! | `restore` | the saved attempts restored as their next attempts |
//! | `start_rest` | the rest started over or fresh, and pinned by a checkpoint |
//! | `run_on` | the forks asked for, the control endpoint, the loop to its end |
//! | `from_store` | `resume --from`: a new run directory taken over from the store |

mod build;
mod decide;
mod from_store;
pub mod plan;
mod read;
mod restore;
mod run_on;
mod source;
mod start_rest;
mod steps;
mod sweep;

pub use from_store::resume_from;
pub use source::{Source, choose_source};
pub use steps::resume;
