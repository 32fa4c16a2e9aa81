//! rollpoint's native agent worker: a tool-calling coding agent that runs inside the sandbox,
//! reads a typed input file, writes a typed result file, and keeps a checkpoint journal at every
//! model and tool boundary so a relaunch continues exactly where the last one stopped.
//!
//! Layout: pure logic (`input`, `transcript`, `plan`, `result`, `journal::codec`, the API
//! mappings under `model`) is separate from the code with effects (`journal`, `model::client`,
//! `tools`, `runner`, `agent`, `cancel`). See docs/design/native-worker.md.
#![forbid(unsafe_code)]

mod agent;
pub mod atomic;
mod cancel;
pub mod errors;
pub mod input;
pub mod journal;
pub mod model;
pub mod plan;
pub mod result;
pub mod resume;
pub mod runner;
pub mod tools;
pub mod transcript;

pub use resume::{ResumeDecision, resume_decision};
pub use runner::{Invocation, exit, run};

/// Writes one diagnostic line to stderr.
pub(crate) fn log(message: &str) {
    eprintln!("rollpoint-worker: {message}");
}
