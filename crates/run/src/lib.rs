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
//! | [`files`] | the run directory's formats: `run.json`, the tasks, `results.jsonl`, `events.jsonl`, the definition, what a checkpoint saved |
//! | [`stack`] | builds the participants of the run; the gateway process; stalled calls parked |
//! | [`run_loop`] | the loop: dispatch, checkpoint, results, forks, the fleet, stop; its input [`Signal`]; progress and metrics |
//! | `new_run` | `rollpoint run`: a new run, then the loop |
//! | `inputs` | what feeds the loop besides its rollouts ([`Inputs`]) |
//! | [`resume`](mod@resume) | `rollpoint resume` (and `--from`): read, choose the source, sweep, plan, restore, start the rest, the loop |
//! | [`claim`] | `RUN_DIR/lock`, the run's claim on its checkpoint store, a run taken over |
//! | [`endpoint`] | the run's HTTP control endpoint, the dashboard, exec and shell |
//! | [`view`] | what the dashboard and the report show, and the one page that draws it |
//! | [`report`] | `rollpoint report`: one self-contained HTML page of a run |
//! | [`status`] | `rollpoint status` |
//! | [`export`] | trajectories of a run's rollouts (`rollpoint export`) |
//!
//! See docs/design/run.md.
#![forbid(unsafe_code)]

pub mod claim;
pub mod config;
pub mod endpoint;
mod errors;
pub mod export;
pub mod files;
mod inputs;
mod new_run;
pub mod report;
pub mod resume;
pub mod run_loop;
pub mod stack;
pub mod status;
pub mod view;

pub use claim::takeover::holds_run;
pub use config::{
    CONFIG_VERSION, MAX_CHECKPOINT_EVERY_S, MAX_CONCURRENCY, MAX_KEEP, ModelSource, RunConfig,
    StoreKind,
};
pub use endpoint::{EndpointFile, Listen};
pub use errors::RunError;
pub use files::results::{ResultsLog, read_results};
pub use files::state::{RUN_STATE_VERSION, RunState};
pub use files::tasks::{TasksFile, load_tasks};
pub use inputs::Inputs;
pub use new_run::run;
pub use resume::{resume, resume_from};
pub use run_loop::progress::{Progress, Reporter};
pub use run_loop::{Ending, Signal};

/// Exit code of a run stopped by a signal after a checkpoint (EX_TEMPFAIL).
pub const EXIT_STOPPED: i32 = 75;
