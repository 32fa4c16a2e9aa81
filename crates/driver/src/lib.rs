//! The rollout driver: carries one rollout from its task to its result
//! (seed, harness, verify, return) as a persisted stage machine, and parks it
//! at checkpoints (pausing its harness in place, or stopping and relaunching
//! it) through the in-process [`Runs`] registry the checkpoint control plane
//! calls.
//!
//! Pure logic lives in [`bookmark`] and [`machine`]; [`runner`] and [`runs`]
//! perform the effects (owner calls, the supervisor's control socket). See
//! docs/design/driver.md.
#![forbid(unsafe_code)]

pub mod adapter;
pub mod bookmark;
pub mod ctl;
mod errors;
pub mod launchlog;
pub mod machine;
mod participant;
pub mod result;
pub mod runner;
pub mod runs;
pub mod store;
mod supervisor;
pub mod task;

pub use bookmark::{BOOKMARK_VERSION, Bookmark, Next, Progress, SessionHint, Stage, VerifyMode};
pub use errors::{AdapterError, BookmarkError, ControlError, DriverError};
pub use launchlog::{LaunchEnd, LaunchEntry, RecoveryTier};
pub use participant::{AgentParticipant, AgentRecord};
pub use result::{
    Collected, RESULT_VERSION, RolloutResult, Status, Timings, TranscriptEntry, Usage,
};
pub use runs::{Ctl, DriverConfig, ParkReport, ParkState, RunHandle, RunStatus, Runs};
pub use task::{AdapterSpec, RolloutTask, TASK_VERSION};
