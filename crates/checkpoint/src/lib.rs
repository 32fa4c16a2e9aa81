//! The checkpoint control plane. Every participant (the gateway as kind
//! `model`, the drivers as kind `agent`, the owner as kind `resources`)
//! implements [`Participant`]; this crate turns that small contract into the
//! checkpoint protocol: the pure phase machine ([`phase`]), the control
//! verbs in process ([`ParticipantHost`]) and over HTTP ([`router`],
//! [`HttpParticipant`]), the on-disk format ([`store`]), and the
//! [`Coordinator`] that drives a set of participants through prepare,
//! commit, restore and resume. See docs/design/checkpoints.md.
//!
//! | module | what it is for |
//! |---|---|
//! | [`participant`] | the participant contract and record tagging |
//! | [`phase`] | the pure phase machine |
//! | `api` | the participant API ([`ParticipantApi`]): the checkpoint verbs, one trait for both sides of the wire |
//! | `host` | [`ParticipantHost`]: a participant's control plane in process, one verb per file (an `impl` block of its state), the lease beside them |
//! | `http` | the control routes, one per file |
//! | `client` | [`HttpParticipant`], the routes' client |
//! | [`wire`] | the control requests and replies |
//! | [`store`] | records, manifests, `checkpoint.json`, `LATEST`, retention |
//! | [`coordinator`] | the controller's side over a set of participants |
//! | `reply` | coordinator results and errors as the HTTP contract's replies |
//! | [`id`], [`decode`], [`auth`] | names checked at the edge, body decoding, bearer tokens |
//! | `errors` | the errors of all of it |
#![forbid(unsafe_code)]

mod api;
pub mod auth;
mod client;
pub mod coordinator;
pub mod decode;
mod errors;
mod host;
mod http;
pub mod id;
pub mod participant;
pub mod phase;
mod reply;
pub mod store;
pub mod wire;

pub use api::{CallResult, ParticipantApi};
pub use client::{CALL_MARGIN, HttpParticipant};
pub use coordinator::{
    Checkpointed, Coordinator, CoordinatorConfig, Move, Peer, Plan, Prepared, Restored, Timings,
};
pub use errors::{CallError, Code, CoordinatorError, HookError, MoveField, StoreError};
pub use host::{DEFAULT_LEASE_GRACE, HostConfig, ParticipantHost};
pub use http::{BODY_LIMIT, CheckpointApi, router, serve};
pub use participant::{
    AttemptKey, BLOCKER_CAP, DEFAULT_POLL, HookResult, Kind, Participant, RECORD_KEY_FIELD,
    Readiness, record_key, tag_record, untag_decode, untag_record,
};
pub use phase::Phase;
