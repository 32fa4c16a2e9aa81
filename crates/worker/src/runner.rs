//! One launch of the worker: read the input, open or start the checkpoint, run the loop, write
//! the result. Everything that must be consistent between the loop and a cancellation (the
//! state, the journal, the running tool) sits behind one mutex; whoever ends the run (the loop
//! at its end, or SIGTERM) takes it and never gives it back to the other.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use nix::sys::signal::{SigSet, Signal};

use crate::atomic;
use crate::errors::{JournalError, ModelError};
use crate::input::{self, WorkerInput};
use crate::journal::record::{Header, Launch, ModelResponse, Record, ToolFinished, ToolStarted};
use crate::journal::{self, Journal};
use crate::model::{self, client::Client};
use crate::plan::{self, Step};
use crate::result::{self, ErrorKind, LaunchStats, RunError, Termination, WorkerResult};
use crate::tools::{self, ToolContext, ToolSpec, capped::Capped};
use crate::transcript::{State, ToolStatus};
use crate::{cancel, log};

/// Exit codes. A missing result with a non-zero exit is an infrastructure failure.
pub mod exit {
    /// The run ended without error: the model stopped or a limit was reached.
    pub const OK: i32 = 0;
    /// The run ended with a `transient` or `fatal` error, recorded in the result.
    pub const ERROR: i32 = 1;
    /// The command line was unusable.
    pub const USAGE: i32 = 2;
    /// The result could not be written.
    pub const NO_RESULT: i32 = 74;
    /// Stopped by SIGTERM or SIGINT; a `cancelled` result was written.
    pub const CANCELLED: i32 = 143;
}

/// The three paths of a launch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invocation {
    pub input: PathBuf,
    pub result: PathBuf,
    pub checkpoint: PathBuf,
}

/// Who owns the end of the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    Running,
    Cancelling,
    Finishing,
}

/// A tool call running now, with its output so far.
#[derive(Debug)]
pub(crate) struct Running {
    pub call_id: String,
    pub output: Arc<Mutex<Capped>>,
}

#[derive(Debug)]
pub(crate) struct Shared {
    pub phase: Phase,
    pub state: State,
    pub journal: Journal,
    pub stats: LaunchStats,
    pub running: Option<Running>,
}

#[derive(Debug)]
pub(crate) struct Engine {
    pub shared: Mutex<Shared>,
    pub running_group: Arc<Mutex<Option<nix::unistd::Pid>>>,
    pub result_path: PathBuf,
}

impl Engine {
    /// The shared state, while the run is still the loop's to run. Otherwise this thread
    /// stops here for good: the process is about to exit on another thread.
    fn lock_running(&self) -> MutexGuard<'_, Shared> {
        let guard = self.shared.lock().unwrap_or_else(PoisonError::into_inner);
        if guard.phase != Phase::Running {
            drop(guard);
            park_forever();
        }
        guard
    }
}

pub(crate) fn park_forever() -> ! {
    loop {
        std::thread::park();
    }
}

/// Writes `result` atomically; logs and reports failure.
pub(crate) fn write_result(path: &Path, result: &WorkerResult) -> bool {
    let bytes = match serde_json::to_vec_pretty(result) {
        Ok(b) => b,
        Err(e) => {
            log(&format!("result {}: cannot encode: {e}", path.display()));
            return false;
        }
    };
    match atomic::write_atomic(path, &bytes) {
        Ok(()) => true,
        Err(e) => {
            log(&format!("result {}: cannot write: {e}", path.display()));
            false
        }
    }
}

fn fail_early(inv: &Invocation, rollout_id: Option<String>, message: String) -> i32 {
    log(&message);
    if write_result(&inv.result, &result::early_failure(rollout_id, message)) {
        exit::ERROR
    } else {
        exit::NO_RESULT
    }
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
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
        Err(message) => return fail_early(inv, rollout, message),
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
    Loop::new(&engine, &input, setup).run()
}

/// What the loop needs besides the state, checked before it starts.
struct Setup {
    workdir: PathBuf,
    bearer: Option<String>,
}

impl Setup {
    fn new(input: &WorkerInput) -> Result<Self, String> {
        let workdir = match &input.workdir {
            Some(w) if w.is_dir() => w.clone(),
            Some(w) => {
                return Err(format!(
                    "input field `workdir`: {} is not a directory",
                    w.display()
                ));
            }
            None => std::env::current_dir()
                .map_err(|e| format!("cannot read the current directory: {e}"))?,
        };
        let bearer = match &input.model.api_key_env {
            Some(name) => Some(std::env::var(name).map_err(|_| {
                format!("input field `model.api_key_env`: environment variable {name} is not set")
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

/// The agent loop of one launch.
struct Loop<'a> {
    engine: &'a Engine,
    input: &'a WorkerInput,
    client: Client,
    tools: ToolContext,
    specs: Vec<ToolSpec>,
    started: Instant,
    base_elapsed_ms: u64,
    run_deadline: Instant,
}

impl<'a> Loop<'a> {
    fn new(engine: &'a Engine, input: &'a WorkerInput, setup: Setup) -> Self {
        let base_elapsed_ms = engine
            .shared
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .state
            .elapsed_ms;
        let started = Instant::now();
        let budget_ms = input
            .limits
            .wall_clock_secs
            .saturating_mul(1000)
            .saturating_sub(base_elapsed_ms);
        Self {
            engine,
            input,
            client: Client::new(
                model::endpoint(&input.model.base_url, input.model.api),
                setup.bearer,
            ),
            tools: ToolContext {
                workdir: setup.workdir,
                timeout: Duration::from_secs(input.limits.tool_timeout_secs),
                output_cap: usize::try_from(input.limits.tool_output_cap_bytes)
                    .unwrap_or(usize::MAX),
                running_group: Arc::clone(&engine.running_group),
            },
            specs: tools::specs(),
            started,
            base_elapsed_ms,
            run_deadline: started + Duration::from_millis(budget_ms),
        }
    }

    fn elapsed_ms(&self) -> u64 {
        self.base_elapsed_ms + millis(self.started.elapsed())
    }

    /// Applies `records` to the state and makes them durable: one boundary.
    fn commit(&self, records: &[Record], running: Option<Running>) -> Result<(), String> {
        let mut guard = self.engine.lock_running();
        let shared = &mut *guard;
        for record in records {
            shared
                .state
                .apply(record)
                .map_err(|e| format!("internal error: {}", e.0))?;
        }
        shared.running = running;
        if let Err(e) = shared.journal.append(records, &shared.state) {
            shared.stats.checkpoint_failures += 1;
            log(&format!("checkpoint write failed (the run goes on): {e}"));
        }
        Ok(())
    }

    fn run(self) -> i32 {
        loop {
            let step = {
                let guard = self.engine.lock_running();
                plan::next_step(&guard.state, &self.input.limits, self.elapsed_ms())
            };
            let outcome = match step {
                Step::Finish(termination) => return self.finish(termination, None),
                Step::CallModel => self.call_model(),
                Step::RunTool(call) => self.run_tool(&call),
                Step::Interrupted(call) => self.settle_interrupted(&call.id),
            };
            if let Err((termination, error)) = outcome {
                return self.finish(termination, error);
            }
        }
    }

    fn call_model(&self) -> Result<(), (Termination, Option<RunError>)> {
        let (body, call) = {
            let guard = self.engine.lock_running();
            let body = model::request_body(
                self.input.model.api,
                &self.input.model.name,
                &guard.state.messages,
                &self.specs,
            );
            (body, guard.state.usage.model_calls)
        };
        let key = format!("{}:{call}", self.input.rollout_id);
        let limits = &self.input.limits;
        let call_deadline = Instant::now() + Duration::from_secs(limits.model_call_timeout_secs);
        let answer = self
            .client
            .post(
                &body,
                &key,
                call_deadline,
                self.run_deadline,
                limits.model_retries,
            )
            .map_err(|e| {
                let error = |kind| Some(RunError::new(kind, e.to_string()));
                match &e {
                    ModelError::Deadline { .. } => (Termination::Deadline, None),
                    ModelError::Transient { .. } => {
                        (Termination::Error, error(ErrorKind::Transient))
                    }
                    ModelError::Fatal { .. } => (Termination::Error, error(ErrorKind::Fatal)),
                }
            })?;
        if answer.retries > 0 {
            self.engine.lock_running().stats.model_retries += answer.retries;
        }
        let reply = model::parse_reply(self.input.model.api, &answer.body, call).map_err(|m| {
            let message = format!("model call to {}: {m}", self.client.url());
            (
                Termination::Error,
                Some(RunError::new(ErrorKind::Fatal, message)),
            )
        })?;
        let record = Record::ModelResponse(ModelResponse {
            call,
            message: reply.message,
            usage: reply.usage,
            elapsed_ms: self.elapsed_ms(),
        });
        self.commit(&[record], None).map_err(fatal)
    }

    fn run_tool(
        &self,
        call: &crate::transcript::ToolCall,
    ) -> Result<(), (Termination, Option<RunError>)> {
        let output = Arc::new(Mutex::new(Capped::new(self.tools.output_cap)));
        let started = Record::ToolStarted(ToolStarted {
            call_id: call.id.clone(),
            elapsed_ms: self.elapsed_ms(),
        });
        let running = Running {
            call_id: call.id.clone(),
            output: Arc::clone(&output),
        };
        self.commit(&[started], Some(running)).map_err(fatal)?;
        let remaining = self.run_deadline.saturating_duration_since(Instant::now());
        let mut ctx = self.tools.clone();
        ctx.timeout = ctx.timeout.min(remaining.max(Duration::from_millis(1)));
        let began = Instant::now();
        let outcome = tools::run(call, &ctx, &output);
        let finished = Record::ToolFinished(ToolFinished {
            call_id: call.id.clone(),
            content: outcome.content,
            status: outcome.status,
            exit_code: outcome.exit_code,
            duration_ms: millis(began.elapsed()),
            truncated_bytes: outcome.truncated_bytes,
            elapsed_ms: self.elapsed_ms(),
        });
        self.commit(&[finished], None).map_err(fatal)
    }

    fn settle_interrupted(&self, call_id: &str) -> Result<(), (Termination, Option<RunError>)> {
        let record = Record::ToolFinished(ToolFinished {
            call_id: call_id.to_owned(),
            content: "interrupted: the worker stopped while this tool call ran; it was not run \
                      again and its effects may be partial. Check the state before retrying."
                .to_owned(),
            status: ToolStatus::Interrupted,
            exit_code: None,
            duration_ms: 0,
            truncated_bytes: 0,
            elapsed_ms: self.elapsed_ms(),
        });
        self.commit(&[record], None).map_err(fatal)
    }

    fn finish(&self, termination: Termination, error: Option<RunError>) -> i32 {
        let result = {
            let mut guard = self.engine.lock_running();
            guard.phase = Phase::Finishing;
            result::build(&guard.state, termination, error, None, guard.stats)
        };
        if !write_result(&self.engine.result_path, &result) {
            return exit::NO_RESULT;
        }
        match result.error {
            None => exit::OK,
            Some(_) => exit::ERROR,
        }
    }
}

fn fatal(message: String) -> (Termination, Option<RunError>) {
    (
        Termination::Error,
        Some(RunError::new(ErrorKind::Fatal, message)),
    )
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
