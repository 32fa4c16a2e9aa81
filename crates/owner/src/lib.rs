//! The owner: lends sandboxes to rollouts (a session per rollout), runs
//! commands and launches in them for drivers on any machine, grades them,
//! and is the only one that snapshots and forks them for checkpoints.
//!
//! [`Owner`] is the contract; [`LocalOwner`] serves it in process over a
//! sandbox backend, [`router`] serves any owner over HTTP, and [`HttpOwner`]
//! is the client of those routes. See docs/design/owner.md.
//!
//! | module | what it is for |
//! |---|---|
//! | `owner` | the [`Owner`] contract |
//! | `local` | [`LocalOwner`], one file per verb |
//! | `http` | the routes, one per file; `client` is their client |
//! | `participant` | the owner as the `resources` participant |
//! | [`task`] | what a task asks of its sandbox, checked |
//! | [`record`] | the session record a checkpoint stores |
//! | [`verdict`] | grading the verify command's output (pure) |
//! | [`decode`], `errors` | body decoding with the field named, the owner's errors |
#![forbid(unsafe_code)]

mod client;
pub mod decode;
mod errors;
mod http;
mod local;
mod owner;
mod participant;
pub mod record;
pub mod task;
pub mod travel;
pub mod verdict;

pub use client::HttpOwner;
pub use errors::OwnerError;
pub use http::{BODY_LIMIT, LAUNCHES_MAX, OwnerApi, router, serve};
pub use local::{LiveSession, LocalOwner};
pub use owner::{Access, Launched, Owner, OwnerCounts, OwnerResult, SessionInfo, SessionLaunch};
pub use participant::ResourcesParticipant;
pub use record::{RECORD_VERSION, SessionRecord};
/// What a session's sandbox used ([`Owner::usage`]).
pub use rollpoint_sandbox::{Limits, ResourceUsage};
pub use task::{
    MAX_UPLOAD_BYTES, OwnerTask, RewardMode, Upload, UploadFile, VERIFIER_DIR, VerifySpec,
};
pub use verdict::Verdict;
