//! One launch of the worker: read the input, open or start the checkpoint, run the loop, write
//! the result. Everything that must be consistent between the loop and a cancellation (the
//! state, the journal, the running tool) sits behind one mutex (`engine`); whoever ends the run
//! (the loop at its end, or SIGTERM) takes it and never gives it back to the other.

use rollpoint_proto::clock::unix_ms;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use nix::sys::signal::{SigSet, Signal};

use crate::agent::Loop;
use crate::atomic;
use crate::cancel;
use crate::engine::{Engine, Phase, Shared, log, write_result};
use crate::errors::{JournalError, SetupError};
use crate::input::{self, WorkerInput};
use crate::journal::record::{Header, Launch, Record};
use crate::journal::{self, Journal};
use crate::result::{self, LaunchStats};
use crate::transcript::State;

pub use crate::engine::exit;

/// The three paths of a launch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invocation {
    pub input: PathBuf,
    pub result: PathBuf,
    pub checkpoint: PathBuf,
}

fn fail_early(inv: &Invocation, rollout_id: Option<String>, message: String) -> i32 {
    log(&message);
    if write_result(&inv.result, &result::early_failure(rollout_id, message)) {
        exit::ERROR
    } else {
        exit::NO_RESULT
    }
}

/// Runs one launch. Must be called before the process starts any thread: it takes over
/// SIGTERM and SIGINT for the whole process. Returns the exit code.
pub fn run(inv: &Invocation) -> i32 {
    let mut signals = SigSet::empty();
    signals.add(Signal::SIGTERM);
    signals.add(Signal::SIGINT);
    if let Err(e) = signals.thread_block() {
        log(&format!("cannot block SIGTERM: {e}"));
    }
    if let Err(e) = atomic::remove_stale_temps(&inv.result) {
        log(&format!(
            "result {}: cannot clear stale temp files: {e}",
            inv.result.display()
        ));
    }
    let input = match input::load(&inv.input) {
        Ok(i) => i,
        Err(e) => return fail_early(inv, None, e.to_string()),
    };
    let rollout = Some(input.rollout_id.clone());
    let setup = match Setup::new(&input) {
        Ok(s) => s,
        Err(e) => return fail_early(inv, rollout, e.to_string()),
    };
    let mut stats = LaunchStats::default();
    let (journal, state) = match open_checkpoint(&inv.checkpoint, &input, &mut stats) {
        Ok(x) => x,
        Err(e) => return fail_early(inv, rollout, e.to_string()),
    };
    let engine = Arc::new(Engine {
        shared: Mutex::new(Shared {
            phase: Phase::Running,
            state,
            journal,
            stats,
            running: None,
        }),
        running_group: Arc::new(Mutex::new(None)),
        result_path: inv.result.clone(),
    });
    cancel::watch(Arc::clone(&engine), signals);
    Loop::new(&engine, &input, setup.workdir, setup.bearer).run()
}

/// What the loop needs besides the state, checked before it starts.
struct Setup {
    workdir: PathBuf,
    bearer: Option<String>,
}

impl Setup {
    fn new(input: &WorkerInput) -> Result<Self, SetupError> {
        let workdir = match &input.workdir {
            Some(w) if w.is_dir() => w.clone(),
            Some(w) => return Err(SetupError::Workdir(w.clone())),
            None => std::env::current_dir().map_err(SetupError::CurrentDir)?,
        };
        let bearer = match &input.model.api_key_env {
            Some(name) => Some(std::env::var(name).map_err(|source| SetupError::ApiKeyEnv {
                name: name.clone(),
                source,
            })?),
            None => None,
        };
        Ok(Self { workdir, bearer })
    }
}

/// Opens the checkpoint of a relaunch, or starts one. A checkpoint that cannot be read, or
/// belongs to another rollout or task, is an error; one that cannot be written is not.
fn open_checkpoint(
    path: &Path,
    input: &WorkerInput,
    stats: &mut LaunchStats,
) -> Result<(Journal, State), JournalError> {
    let mut failed = |e: &JournalError| {
        stats.checkpoint_failures += 1;
        log(&format!("checkpoint write failed (the run goes on): {e}"));
    };
    if let Err(e) = atomic::remove_stale_temps(path) {
        log(&format!(
            "checkpoint {}: cannot clear stale temp files: {e}",
            path.display()
        ));
    }
    let fresh = State::new(
        &input.rollout_id,
        input.task.system.as_deref(),
        &input.task.prompt,
    );
    let exists = match std::fs::symlink_metadata(path) {
        Ok(_) => true,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
        Err(source) => {
            return Err(JournalError::Io {
                path: path.to_owned(),
                source,
            });
        }
    };
    if !exists {
        let header = Header {
            rollout_id: input.rollout_id.clone(),
            partial: true,
            created_unix_ms: unix_ms(),
            worker: env!("CARGO_PKG_VERSION").to_owned(),
        };
        let journal = Journal::create(path, header.clone(), &fresh).unwrap_or_else(|e| {
            failed(&e);
            Journal::unwritten(path, header)
        });
        return Ok((journal, fresh));
    }
    let replayed = journal::replay(path)?;
    if replayed.header.rollout_id != input.rollout_id {
        return Err(JournalError::OtherRollout {
            path: path.to_owned(),
            found: replayed.header.rollout_id.clone(),
            expected: input.rollout_id.clone(),
        });
    }
    if replayed.state.initial_messages() != fresh.initial_messages() {
        return Err(JournalError::OtherTask {
            path: path.to_owned(),
        });
    }
    let mut state = replayed.state.clone();
    let mut journal = Journal::open(path, &replayed).unwrap_or_else(|e| {
        failed(&e);
        Journal::unwritten(path, replayed.header.clone())
    });
    let launch = Record::Launch(Launch {
        launch: state.launches + 1,
        elapsed_ms: state.elapsed_ms,
    });
    state.apply(&launch).map_err(|e| JournalError::Replay {
        path: path.to_owned(),
        offset: replayed.len,
        reason: e.0,
    })?;
    if let Err(e) = journal.append(&[launch], &state) {
        failed(&e);
    }
    Ok((journal, state))
}

/// A command line that cannot be used: reported on stderr and, when the result path is
/// known, as a `fatal` result. Returns [`exit::USAGE`].
pub fn usage_error(message: &str, result: Option<&Path>) -> i32 {
    log(&format!(
        "{message}\nusage: rollpoint-worker INPUT RESULT --checkpoint CHECKPOINT"
    ));
    if let Some(path) = result {
        write_result(
            path,
            &result::early_failure(None, format!("command line: {message}")),
        );
    }
    exit::USAGE
}
