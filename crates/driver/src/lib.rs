//! The rollout driver: carries one rollout from its task to its result
//! (seed, harness, verify, return) as a persisted stage machine, and parks it
//! at checkpoints (pausing its harness in place, or stopping and relaunching
//! it) through the in-process [`Runs`] registry the checkpoint control plane
//! calls.
//!
//! Pure logic lives in [`bookmark`] and [`machine`]; [`runner`] and [`runs`]
//! perform the effects (owner calls, the supervisor's control socket). See
//! docs/design/driver.md.
//!
//! | module | what it is for |
//! |---|---|
//! | [`task`] | the rollout task, checked field by field |
//! | [`bookmark`] | the versioned bookmark, recorded before every effect |
//! | [`machine`] | the pure stage machine: events in, effects out; its state (`machine::state`) and a file per kind of step (`step`, `launch`, `park`, `stop`, `finish`) |
//! | [`runner`] | performs one rollout's effects: the runner (`runner::context`), `drive`, a file per kind of effect (`perform`, `launch`, `wait`, `pause`, `stop`, `verify`), a launch's environment (`env`) |
//! | [`runs`] | the registry of runs: slots, parking, export and install |
//! | [`ctl`] | the control state a run shares with the registry |
//! | [`metrics`] | pauses by outcome and their confirm times, for `/metrics` |
//! | [`adapter`] | everything harness-specific, one file per adapter; the contract (`adapter::contract`), the adapter a task names (`select`), shared readers (`fields`) |
//! | `supervisor` | the host side of a launch's supervisor: its socket, record, pause file |
//! | `participant` | the drivers as the `agent` participant, and [`AgentRecord`] |
//! | [`launchlog`], [`result`], [`store`] | the launch log, the result format, bookmark files |
#![forbid(unsafe_code)]

pub mod adapter;
mod batch;
pub mod bookmark;
pub mod ctl;
mod errors;
pub mod health;
pub mod launchlog;
pub mod machine;
pub mod metrics;
mod participant;
pub mod result;
pub mod runner;
pub mod runs;
pub mod store;
mod supervisor;
pub mod task;

pub use bookmark::{BOOKMARK_VERSION, Bookmark, Next, Progress, SessionHint, Stage, VerifyMode};
pub use errors::{AdapterError, BookmarkError, DriverError, SupervisorError};
pub use health::ModelHealth;
pub use launchlog::{LaunchEnd, LaunchEntry, RecoveryTier};
pub use participant::{AgentParticipant, AgentRecord};
pub use result::{
    Collected, ForkedFrom, InfraClass, RESULT_VERSION, RESULT_VERSION_OLDEST, RolloutResult,
    Status, Timings, TranscriptEntry, Usage,
};
pub use runs::{Ctl, DriverConfig, MAX_SLOTS, ParkReport, ParkState, RunHandle, RunStatus, Runs};
pub use task::{AdapterSpec, RolloutTask, TASK_VERSION};
