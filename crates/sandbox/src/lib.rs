//! Sandboxes: the backend contract the owner lends them through, the local
//! backend (overlayfs over a base, namespaces, the supervisor as anchor,
//! cgroups, snapshot stores), and moving files in and out of a sandbox's
//! root without ever touching anything outside it.
//!
//! See docs/design/local-sandboxes.md and docs/design/sandbox-files.md.
#![deny(unsafe_code)]

mod backend;
mod confine;
mod errors;
pub mod local;

pub use backend::{
    Backend, BackendListing, Base, LaunchHandle, Limits, Network, SPEC_VERSION, SandboxInfo,
    SandboxSpec, SnapshotRef,
};
pub use confine::{SandboxRoot, sandbox_relative};
pub use errors::Error;
