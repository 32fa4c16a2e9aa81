//! Sandboxes: the backend contract the owner lends them through, the local
//! backend (overlayfs over a base, namespaces, the supervisor as anchor,
//! cgroups, snapshot stores), and moving files in and out of a sandbox's
//! root without ever touching anything outside it.
//!
//! - `backend`: the [`Backend`] contract, specs, limits and what verbs return.
//! - `confine`: [`SandboxRoot`]: uploads and downloads confined beneath a root.
//! - `errors`: [`Error`]: file transfer, the local backend and its anchor.
//! - [`local`]: the local backend, one file per verb, each an
//!   `impl LocalBackend` block (`create`, `fork`, `exec`, `pause`,
//!   `transfer`, `snapshot`, `destroy`, `list`, `sweep`, `usage`, `shell`,
//!   `travel`), beside:
//!   - `local::spawn`: the anchor started in new namespaces, in its cgroups;
//!   - `local::anchor`: the owner's side of the anchor socket;
//!   - `local::mounts`: the overlay mount and its private `/tmp`;
//!   - `local::cgroups`: a sandbox's cgroups: limits, freeze, kill, remove;
//!   - `local::base`: the overlay's lower layers: tarballs unpacked once,
//!     images' layers from the image cache;
//!   - `local::record`: sandbox and snapshot records on disk;
//!   - `local::crash`: the named steps a crash may split, which the tests
//!     crash at one by one.
//!
//! See docs/design/local-sandboxes.md and docs/design/sandbox-files.md.
#![deny(unsafe_code)]

mod backend;
mod confine;
mod errors;
pub mod local;

pub use backend::{
    Backend, BackendListing, Base, DEFAULT_WORKDIR, ImageId, Isolation, LaunchHandle, LaunchRef,
    LimitError, Limits, Network, ResourceUsage, SANDBOX_STATE_DIR, SPEC_VERSION, SandboxInfo,
    SandboxSpec, SnapshotRef,
};
pub use confine::{SandboxRoot, sandbox_relative};
pub use errors::{Error, Fault};
