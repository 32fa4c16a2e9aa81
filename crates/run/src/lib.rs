//! The run controller: `rollpoint run`, `rollpoint resume` and
//! `rollpoint status` as a library. One process holds everything (the
//! embedded default): the scripted model or an upstream, the gateway and its
//! model participant, the local owner and its resources participant, the
//! drivers and their agent participant, and the checkpoint coordinator over
//! in-process controls. The controller dispatches a file of tasks, writes a
//! result row per finished rollout, checkpoints every in-flight rollout on a
//! timer and on signals, and after a crash continues from the latest
//! checkpoint so every task finishes exactly once.
//!
//! Pure logic: [`config`], [`tasks`], [`state`], [`results`] (formats and
//! their readers), [`plan`] (what a resume does). Effects: [`stack`] (builds
//! the participants), [`controller`] (the loop), [`control`] (its HTTP
//! endpoint) and [`progress`] (bars on a terminal, plain lines otherwise).
//! See docs/design/run.md.
#![forbid(unsafe_code)]

pub mod config;
pub mod control;
pub mod controller;
mod errors;
pub mod plan;
pub mod progress;
pub mod results;
pub mod stack;
pub mod state;
pub mod status;
pub mod tasks;

pub use config::{CONFIG_VERSION, ModelSource, RunConfig, StoreKind};
pub use control::{ControlFile, Listen};
pub use controller::{Ending, Inputs, Signal, resume, run};
pub use errors::RunError;
pub use progress::{Progress, Reporter};
pub use results::{ResultsLog, read_results};
pub use state::{RUN_STATE_VERSION, RunState};
pub use tasks::{TasksFile, load_tasks};

/// Exit code of a run stopped by a signal after a checkpoint (EX_TEMPFAIL).
pub const EXIT_STOPPED: i32 = 75;
