//! Sandboxes. For now: moving files in and out of a sandbox's root
//! filesystem without ever touching anything outside it.
//!
//! See docs/design/sandbox-files.md.
#![forbid(unsafe_code)]

mod confine;
mod errors;

pub use confine::{SandboxRoot, sandbox_relative};
pub use errors::Error;
