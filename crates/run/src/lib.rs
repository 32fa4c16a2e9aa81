//! The run controller: `rollpoint run`, `rollpoint resume` and
//! `rollpoint status` as a library. The runner process holds the local owner
//! and its resources participant, the drivers and their agent participant,
//! and the checkpoint coordinator; the gateway (with the scripted model, if
//! any) is a process of its own that outlives a crash of the runner, the
//! `model` participant over its control routes. The controller dispatches a file of tasks, writes a
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
//! | [`events`] | `events.jsonl`: start, resumes, checkpoints and their times, stop, end |
//! | `clock` | the run's wall clock (Unix ms), read by the loop and the event log alike |
//! | [`report`] | `rollpoint report`: one self-contained HTML page of a run |
//! | [`view`] | what the dashboard and the report show, and the one page that draws it |
//! | [`plan`] | what a resume does with each task (pure) |
//! | `saved` | what a published checkpoint saved, read through the participants' formats |
//! | [`gateway`] | the run's gateway process: started, waited for after a crash, stopped |
//! | [`lock`] | `RUN_DIR/lock`: one process drives a run at a time |
//! | `metrics` | the run's Prometheus metrics, at `GET /metrics` on the control endpoint |
//! | [`stack`] | builds the participants of the run |
//! | [`controller`] | a new run and the loop: dispatch, checkpoint, results |
//! | [`resume`](mod@resume) | `rollpoint resume`: sweep, plan, restore, then the loop |
//! | [`definition`] | the run's definition (run.json, tasks, results) published with each checkpoint |
//! | [`lease`] | the run's claim on its checkpoint store: heartbeat, release, fencing |
//! | [`takeover`] | `rollpoint resume --from`: a run continued on a machine that has nothing of it |
//! | [`endpoint`] | the run's HTTP control endpoint and the requests it sends the loop |
//! | [`dashboard`] | the live dashboard's page, documents and change stream on the endpoint |
//! | [`exec`] | a command in a live rollout's sandbox, or in a fork of its snapshot |
//! | [`shell`] | a terminal in a live rollout's sandbox over a WebSocket |
//! | [`status`] | `rollpoint status` |
//! | [`progress`] | bars on a terminal, plain lines otherwise |
//!
//! See docs/design/run.md.
#![forbid(unsafe_code)]

pub mod config;
pub mod controller;
pub mod dashboard;
pub mod definition;
pub mod endpoint;
mod errors;
pub mod events;
pub mod exec;
pub mod export;
mod fleet;
mod fork;
pub mod gateway;
pub mod lease;
pub mod lock;
mod metrics;
pub mod plan;
pub mod progress;
pub mod report;
pub mod results;
pub mod resume;
mod saved;
pub mod shell;
pub mod stack;
mod stalls;
pub mod state;
pub mod status;
pub mod takeover;
pub mod tasks;
pub mod view;

pub use config::{
    CONFIG_VERSION, MAX_CHECKPOINT_EVERY_S, MAX_CONCURRENCY, MAX_KEEP, ModelSource, RunConfig,
    StoreKind,
};
pub use controller::{Ending, Inputs, run};
pub use endpoint::{EndpointFile, Listen, Signal};
pub use errors::RunError;
pub use progress::{Progress, Reporter};
pub use results::{ResultsLog, read_results};
pub use resume::resume;
pub use state::{RUN_STATE_VERSION, RunState};
pub use takeover::{holds_run, resume_from};
pub use tasks::{TasksFile, load_tasks};

/// Exit code of a run stopped by a signal after a checkpoint (EX_TEMPFAIL).
pub const EXIT_STOPPED: i32 = 75;
