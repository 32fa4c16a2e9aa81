//! rollpoint's native agent worker: a tool-calling coding agent that runs inside the sandbox,
//! reads a typed input file, writes a typed result file, and keeps a checkpoint journal at every
//! model and tool boundary so a relaunch continues exactly where the last one stopped.
//!
//! Pure logic (`input`, `transcript`, `plan`, `result`, `journal::codec`, the API mappings
//! under `model`) is kept apart from the code with effects. See docs/design/native-worker.md.
//!
//! # Modules
//!
//! - `runner`: one launch: load the input, open or start the checkpoint, run the loop.
//! - `agent`: the loop: next step, model call or tool run, one durable boundary each.
//! - `cancel`: SIGTERM and SIGINT: kill the running tool, write a `cancelled` result, exit.
//! - `engine`: what the loop and a cancellation share (state lock, phase, exit codes).
//! - `input`: the typed, strict input file.
//! - `transcript`: the rollout's state as a value and how each record moves it.
//! - `plan`: the next step and every limit, decided from the state alone.
//! - `journal`: the checkpoint journal: append, compact, replay (`codec`, `record`).
//! - `model`: request bodies and replies per API, and the HTTP client with retries.
//! - `tools`: bash, read, write and edit, their specs, and dispatch.
//! - `result`: the typed result file, built from the state.
//! - `resume`: whether a relaunch should continue from the checkpoint.
//! - `atomic`: atomic private file writes and stale temp-file cleanup.
//! - `errors`: error types naming the file, field or offset they are about.
#![forbid(unsafe_code)]

mod agent;
pub mod atomic;
mod cancel;
mod engine;
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
