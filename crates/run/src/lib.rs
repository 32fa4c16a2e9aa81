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
//! | module | what it is for |
//! |---|---|
//! | [`config`] | the run configuration file, versioned, every setting checked |
//! | [`tasks`] | the tasks file, every line checked before anything runs |
//! | [`state`] | `run.json`: the config, the attempts dispatched, the gateway port |
//! | [`results`] | `results.jsonl`, one row per finished rollout |
//! | [`plan`] | what a resume does with each task (pure) |
//! | `saved` | what a published checkpoint saved, read through the participants' formats |
//! | [`stack`] | builds the participants of the embedded run |
//! | [`controller`] | the loop: dispatch, checkpoint, results, resume |
//! | [`control`] | the run's HTTP control endpoint and the requests it sends the loop |
//! | [`status`] | `rollpoint status` |
//! | [`progress`] | bars on a terminal, plain lines otherwise |
//!
//! See docs/design/run.md.
#![forbid(unsafe_code)]

pub mod config;
pub mod control;
pub mod controller;
mod errors;
pub mod plan;
pub mod progress;
pub mod results;
mod saved;
pub mod stack;
pub mod state;
pub mod status;
pub mod tasks;

pub use config::{CONFIG_VERSION, ModelSource, RunConfig, StoreKind};
pub use control::Signal;
pub use control::{ControlFile, Listen};
pub use controller::{Ending, Inputs, resume, run};
pub use errors::RunError;
pub use progress::{Progress, Reporter};
pub use results::{ResultsLog, read_results};
pub use state::{RUN_STATE_VERSION, RunState};
pub use tasks::{TasksFile, load_tasks};

/// Exit code of a run stopped by a signal after a checkpoint (EX_TEMPFAIL).
pub const EXIT_STOPPED: i32 = 75;
