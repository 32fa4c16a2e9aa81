//! Adapters hold everything harness-specific: where the harness keeps its
//! session, how the sandbox is prepared, whether a saved session can be
//! continued, the launch command, what is collected afterwards, and whether
//! the harness may be paused at checkpoints. The driver stays generic.
//!
//! The contract is `contract`; `select` builds the adapter a task names
//! (`spec`); `fields` holds the small readers adapters share; each adapter is
//! a file (`harness` is what the four coding-agent harnesses share).

pub mod claude_code;
pub mod codex;
pub mod command;
mod contract;
pub mod fake;
mod fields;
pub mod harness;
pub mod native;
pub mod opencode;
pub mod pi;
mod select;
pub mod spec;

pub use crate::launchlog::RecoveryTier;
pub use crate::result::Collected;
pub use contract::{Adapter, Cx, Decision, LaunchCommand};
pub use select::from_spec;
