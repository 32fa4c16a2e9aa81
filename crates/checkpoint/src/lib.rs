//! The checkpoint control plane. Every participant (the gateway as kind
//! `model`, the drivers as kind `agent`, the owner as kind `resources`)
//! implements [`Participant`]; this crate turns that small contract into the
//! checkpoint protocol: the phase machine, the `/v1/checkpoint/*` routes and
//! their client, the on-disk checkpoint format, and the coordinator that
//! drives a set of participants through prepare, commit, restore and resume.
//! See docs/design/checkpoints.md.
#![forbid(unsafe_code)]

mod errors;
pub mod participant;

pub use errors::HookError;
pub use participant::{
    BLOCKER_CAP, DEFAULT_POLL, HookResult, Kind, Participant, RECORD_KEY_FIELD, Readiness,
    record_key,
};
