//! The agent loop of one launch: ask the plan for the next step, carry it out (model call or
//! tool run), and make the boundary durable, until the plan says stop. Every mutation of the
//! state goes through `commit`, which applies the records and appends them to the journal under
//! the shared lock, so a cancellation sees either all of a boundary or none of it.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::engine::{Engine, Phase, Running, exit, log, millis, write_result};
use crate::errors::{InternalError, ModelError};
use crate::input::WorkerInput;
use crate::journal::record::{ModelResponse, Record, ToolFinished, ToolStarted};
use crate::model::{self, client::Client};
use crate::plan::{self, Step};
use crate::result::{self, ErrorKind, RunError, Termination};
use crate::tools::{self, ToolContext, ToolSpec, capped::Capped};
use crate::transcript::{ToolCall, ToolStatus};

/// The agent loop of one launch.
pub(crate) struct Loop<'a> {
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
    pub(crate) fn new(
        engine: &'a Engine,
        input: &'a WorkerInput,
        workdir: PathBuf,
        bearer: Option<String>,
    ) -> Self {
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
                bearer,
            ),
            tools: ToolContext {
                workdir,
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
    fn commit(&self, records: &[Record], running: Option<Running>) -> Result<(), InternalError> {
        let mut guard = self.engine.lock_running();
        let shared = &mut *guard;
        for record in records {
            shared.state.apply(record).map_err(InternalError)?;
        }
        shared.running = running;
        if let Err(e) = shared.journal.append(records, &shared.state) {
            shared.stats.checkpoint_failures += 1;
            log(&format!("checkpoint write failed (the run goes on): {e}"));
        }
        Ok(())
    }

    pub(crate) fn run(self) -> i32 {
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

    fn run_tool(&self, call: &ToolCall) -> Result<(), (Termination, Option<RunError>)> {
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

fn fatal(e: InternalError) -> (Termination, Option<RunError>) {
    (
        Termination::Error,
        Some(RunError::new(ErrorKind::Fatal, e.to_string())),
    )
}
