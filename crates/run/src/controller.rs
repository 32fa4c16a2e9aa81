//! The controller loop of `rollpoint run` and `rollpoint resume`: dispatch,
//! a result row per finished rollout, checkpoints on a timer and on signals,
//! and a stop (a checkpoint with `stop`, then exit 75) on SIGTERM/SIGINT.
//!
//! One task owns the loop, so checkpoints, result rows and `forget` never
//! overlap: a rollout finishing during a checkpoint is written after it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rollpoint_api::ApiError;
use rollpoint_api::wire::CheckpointReply;
use rollpoint_checkpoint::Plan;
use rollpoint_driver::{
    Bookmark, DriverError, InfraClass, RolloutResult, RolloutTask, RunHandle, RunStatus,
};
use rollpoint_owner::Owner as _;
use rollpoint_proto::key::AttemptKey;
use tokio::sync::{mpsc, watch};

use crate::config::RunConfig;
use crate::endpoint::{self, EndpointRequest, Listen, Signal, StatusReport};
use crate::errors::RunError;
use crate::events::{Event, EventLog};
use crate::progress::{Progress, Reporter};
use crate::results::ResultsLog;
use crate::saved::retained_checkpoints;
use crate::stack::{Stack, open_backend};
use crate::state::{RUN_STATE_VERSION, RunState};
use crate::tasks::TasksFile;
use rollpoint_proto::clock::unix_ms;

/// Resolves when the grace period after a stop request has run out (a margin before it is
/// kept for tearing down); never without a request.
async fn grace_over(mut asked: watch::Receiver<Option<Instant>>, grace: Duration) {
    let Ok(at) = asked.wait_for(Option::is_some).await.map(|at| *at) else {
        return std::future::pending().await;
    };
    if let Some(at) = at {
        tokio::time::sleep_until((at + grace.saturating_sub(teardown_margin(grace))).into()).await;
    }
}

/// What a grace period keeps for tearing down after a checkpoint (sandboxes, the gateway).
fn teardown_margin(grace: Duration) -> Duration {
    Duration::from_secs(1).min(grace / 4)
}

/// A checkpoint the coordinator did not take (everyone was resumed).
#[derive(Debug)]
pub(crate) struct CheckpointFailed {
    id: String,
    error: rollpoint_checkpoint::CoordinatorError,
}

impl CheckpointFailed {
    fn as_run_error(&self) -> RunError {
        RunError::checkpoint(self.id.clone(), self.error.to_string())
    }

    fn api(&self) -> ApiError {
        ApiError::from(&self.error)
    }
}

impl From<CheckpointFailed> for RunError {
    fn from(e: CheckpointFailed) -> Self {
        e.as_run_error()
    }
}

/// What feeds the loop besides its own rollouts.
#[derive(Debug)]
pub struct Inputs {
    /// Signals and control requests.
    pub signals: mpsc::UnboundedReceiver<Signal>,
    /// Serve the control endpoint (its requests arrive on `signals`).
    pub listen: Option<Listen>,
    /// The `rollpoint` binary: its `gateway` subcommand is the run's gateway process.
    pub program: PathBuf,
    /// Forks to make once a resume has restored the run (`rollpoint fork` of a run no
    /// process drives).
    pub forks: Vec<rollpoint_api::wire::ForkRequest>,
    /// Sends to `signals`: the claim's heartbeat tells the loop it was fenced.
    pub loop_tx: mpsc::UnboundedSender<Signal>,
    /// How long after SIGTERM the process may still run (`--grace-s`): the stop checkpoint is
    /// taken only if it fits, and abandoned if it does not finish in time.
    pub grace: Option<Duration>,
    /// When SIGTERM or SIGINT arrived, set by the handler at once: a checkpoint under way
    /// then is bounded by the grace period too.
    pub stop_requested: watch::Receiver<Option<Instant>>,
}

/// How the loop ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ending {
    /// Every task has a result row.
    Finished { rows: usize },
    /// Stopped by a signal after publishing `checkpoint`.
    Stopped { checkpoint: String },
    /// Stopped by a signal without a stop checkpoint, which did not fit the grace period;
    /// a resume continues from `latest`, the newest checkpoint published before.
    StoppedWithout { latest: Option<String>, why: String },
}

pub(crate) fn create_dir(dir: &Path) -> Result<(), RunError> {
    use std::os::unix::fs::DirBuilderExt as _;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| RunError::io(dir, e))
}

/// `rollpoint run`: a new run of `tasks` in `run_dir`.
pub async fn run(
    run_dir: &Path,
    tasks: TasksFile,
    config: RunConfig,
    supervisor: PathBuf,
    env: BTreeMap<String, String>,
    inputs: Inputs,
) -> Result<Ending, RunError> {
    create_dir(run_dir)?;
    let run_dir = std::fs::canonicalize(run_dir).map_err(|e| RunError::io(run_dir, e))?;
    let _lock = crate::lock::RunLock::acquire(&run_dir)?;
    if RunState::path(&run_dir).exists() {
        return Err(RunError::state(
            RunState::path(&run_dir),
            "a run already lives here: continue it with `rollpoint resume`",
        ));
    }
    // The run's claim on its checkpoint store before anything is written: a store another
    // run holds is refused.
    let keeper = crate::lease::hold(
        &config,
        &run_dir,
        crate::lease::Acquire::Start,
        &inputs.loop_tx,
    )
    .await?;
    // The state first, so a run killed while its stack starts can be resumed; its gateway
    // port (0: not chosen yet) is settled once the gateway listens, before any launch.
    let mut state = RunState {
        v: RUN_STATE_VERSION,
        tasks_path: tasks.path.clone(),
        tasks_sha256: tasks.sha256.clone(),
        config: config.clone(),
        gateway_port: config.gateway_port,
        attempts: tasks
            .tasks
            .iter()
            .map(|t| (t.rollout().to_owned(), 0))
            .collect(),
        forks: std::collections::BTreeMap::new(),
        saved_by: std::collections::BTreeMap::new(),
        branched: std::collections::BTreeSet::new(),
        trusted: crate::state::trusted_rollouts(&tasks.tasks),
        infra_retries: BTreeMap::new(),
    };
    state.save(&run_dir)?;
    let backend = open_backend(&run_dir, &config, supervisor)?;
    let stack = Stack::build(
        &run_dir,
        &config,
        backend,
        &inputs.program,
        config.gateway_port,
    )
    .await?;
    if state.gateway_port != stack.gateway_port {
        state.gateway_port = stack.gateway_port;
        state.save(&run_dir)?;
    }
    let serving = match inputs.listen {
        Some(listen) => {
            let reach = endpoint::Reach {
                runs: stack.runs.clone(),
                owner: std::sync::Arc::clone(&stack.owner),
                backend: std::sync::Arc::clone(&stack.backend),
            };
            Some(endpoint::start(&run_dir, listen, reach).await?)
        }
        None => None,
    };
    let mut lp = Loop::new(run_dir, stack, state, tasks.tasks.len(), 0, None, env)?;
    lp.events.record(Event::Started {
        tasks: tasks.tasks.len(),
    });
    for task in tasks.tasks {
        let key = task.group.as_deref().unwrap_or(task.rollout()).to_owned();
        match tasks.failed.get(&key) {
            Some((class, error)) => lp.ended_before_start(&task, *class, error)?,
            None => lp.register(task).await?,
        }
    }
    let ending = lp
        .drive(inputs.signals, inputs.grace, inputs.stop_requested)
        .await;
    drop(serving);
    if let Some(keeper) = keeper {
        keeper.release().await;
    }
    ending
}

type Finished = (String, u32, Result<RolloutResult, DriverError>);

pub(crate) struct Loop {
    pub(crate) run_dir: PathBuf,
    pub(crate) stack: Stack,
    pub(crate) state: RunState,
    pub(crate) results: ResultsLog,
    /// Rollout -> attempt, registered and not finished.
    /// The attempt running of each rollout in flight.
    pub(crate) in_flight: BTreeMap<String, AttemptKey>,
    pub(crate) progress: Progress,
    pub(crate) reporter: Reporter,
    pub(crate) continues: Option<String>,
    pub(crate) tx: mpsc::UnboundedSender<Finished>,
    pub(crate) rx: mpsc::UnboundedReceiver<Finished>,
    pub(crate) lost: Vec<String>,
    pub(crate) metrics: crate::metrics::RunMetrics,
    /// `RUN_DIR/events.jsonl`.
    pub(crate) events: EventLog,
    /// Added to every harness's environment.
    pub(crate) env: BTreeMap<String, String>,
    /// The task of each rollout dispatched, for `retry_infra`.
    pub(crate) tasks: BTreeMap<String, RolloutTask>,
    /// With `--grace-s`: when a stop was asked for, and the grace period that bounds every
    /// checkpoint from then on.
    pub(crate) grace: Option<(watch::Receiver<Option<Instant>>, Duration)>,
}

impl Loop {
    pub(crate) fn new(
        run_dir: PathBuf,
        stack: Stack,
        state: RunState,
        total: usize,
        done: usize,
        continues: Option<String>,
        mut env: BTreeMap<String, String>,
    ) -> Result<Self, RunError> {
        if let Some(base) = stack.gateway_base() {
            env.insert(rollpoint_driver::runner::GATEWAY_VAR.to_owned(), base);
        }
        let results = ResultsLog::open(&run_dir)?;
        let events = EventLog::open(&run_dir);
        let (tx, rx) = mpsc::unbounded_channel();
        let progress = Progress {
            total,
            done,
            ..Progress::default()
        };
        let reporter = Reporter::for_stderr();
        reporter.update(&progress);
        let owner = std::sync::Arc::clone(&stack.owner);
        let metrics = crate::metrics::RunMetrics::new(&stack.runs.pause_metrics(), move || {
            owner.counts().snapshot_totals()
        });
        Ok(Self {
            run_dir,
            stack,
            state,
            results,
            in_flight: BTreeMap::new(),
            progress,
            reporter,
            continues,
            tx,
            rx,
            lost: Vec::new(),
            metrics,
            events,
            env,
            tasks: BTreeMap::new(),
            grace: None,
        })
    }

    pub(crate) fn watch(&mut self, handle: RunHandle, attempt: u32) -> Result<(), RunError> {
        let key = AttemptKey::of(&handle.rollout, attempt)
            .map_err(|e| RunError::rollout(handle.rollout.clone(), e))?;
        self.in_flight.insert(handle.rollout.clone(), key);
        let tx = self.tx.clone();
        tokio::spawn(async move {
            let rollout = handle.rollout.clone();
            let result = handle.result().await;
            let _closed_on_exit = tx.send((rollout, attempt, result));
        });
        Ok(())
    }

    pub(crate) async fn register_key(&self, rollout: &str, attempt: u32) -> Result<(), RunError> {
        if let Some(g) = &self.stack.gateway {
            let key = AttemptKey::of(rollout, attempt)
                .map_err(|e| RunError::rollout(rollout.to_owned(), e))?;
            g.register(&key).await?;
        }
        Ok(())
    }

    /// Dispatches a task as attempt 0.
    pub(crate) async fn register(&mut self, task: RolloutTask) -> Result<(), RunError> {
        let task = task
            .with_env(&self.env)
            .with_limits(&self.state.config.sandbox_limits);
        let rollout = task.rollout().to_owned();
        self.register_key(&rollout, 0).await?;
        if self.state.config.retry_infra > 0 {
            self.tasks.insert(rollout.clone(), task.clone());
        }
        let handle = self
            .stack
            .runs
            .register(task)
            .map_err(|e| RunError::rollout(rollout.clone(), e))?;
        self.watch(handle, 0)
    }

    /// Writes the row of a task the infrastructure failed before it could
    /// run (its environment did not build): no sandbox, no reward.
    pub(crate) fn ended_before_start(
        &mut self,
        task: &RolloutTask,
        class: InfraClass,
        error: &str,
    ) -> Result<(), RunError> {
        let now = unix_ms();
        let mut row = RolloutResult::infra_error(
            &task.task.id,
            task.rollout(),
            0,
            class,
            error.to_owned(),
            rollpoint_driver::Timings {
                started_at_ms: now,
                ended_at_ms: now,
                ..Default::default()
            },
        );
        row.group.clone_from(&task.group);
        tracing::warn!(rollout = %row.rollout, class = class.as_str(), error, "the rollout cannot run");
        self.results.append(&row)?;
        self.metrics.result(&row);
        self.progress.done += 1;
        Ok(())
    }

    /// Starts a retired rollout over from its seed as attempt `last + 1`.
    pub(crate) async fn start_over(
        &mut self,
        task: RolloutTask,
        last: u32,
    ) -> Result<(), RunError> {
        let task = task.with_env(&self.env);
        let rollout = task.rollout().to_owned();
        let next = last.saturating_add(1);
        self.register_key(&rollout, next).await?;
        self.state.attempts.insert(rollout.clone(), next);
        self.state.save(&self.run_dir)?;
        if self.state.config.retry_infra > 0 {
            self.tasks.insert(rollout.clone(), task.clone());
        }
        let mark = Bookmark::seed(&rollout, last, unix_ms());
        let handle = self
            .stack
            .runs
            .install(vec![(task, mark)])
            .map_err(|e| RunError::rollout(rollout.clone(), e))?
            .pop()
            .ok_or_else(|| RunError::rollout(rollout.clone(), "the drivers started nothing"))?;
        self.watch(handle, next)
    }

    pub(crate) fn scope(&self) -> Vec<AttemptKey> {
        self.in_flight.values().cloned().collect()
    }

    /// Takes a checkpoint of every in-flight rollout, holding them paused
    /// for `hold` after publishing; with `stop` it ends them (their
    /// sandboxes are freed once the checkpoint is durable).
    pub(crate) async fn checkpoint(
        &mut self,
        id: Option<String>,
        stop: bool,
        hold: Duration,
    ) -> Result<CheckpointReply, CheckpointFailed> {
        let id = id.unwrap_or_else(|| format!("ck-{}", unix_ms()));
        let started = Instant::now();
        let plan = Plan {
            id: id.clone(),
            scope: self.scope(),
            continues: self.continues.clone(),
            stop,
        };
        // With a store, the run's definition goes first, so the publish marker implies it.
        let checkpoint = async {
            if let Some(store) = &self.stack.remote {
                crate::definition::publish(store, &self.run_dir, &self.state, &id)
                    .await
                    .map_err(|source| rollpoint_checkpoint::CoordinatorError::Store {
                        checkpoint: id.clone(),
                        source,
                    })?;
            }
            self.stack.coordinator.checkpoint_held(&plan, hold).await
        };
        let taken = match &self.grace {
            None => checkpoint.await,
            Some((asked, grace)) => tokio::select! {
                taken = checkpoint => taken,
                () = grace_over(asked.clone(), *grace) => Err(rollpoint_checkpoint::CoordinatorError::NotPrepared {
                    checkpoint: id.clone(),
                    detail: format!("abandoned: the {:.1} s grace period after SIGTERM ran out", grace.as_secs_f64()),
                }),
            },
        };
        let done = match taken {
            Ok(done) => done,
            Err(error) => {
                self.metrics.failed();
                self.events.record(Event::CheckpointFailed {
                    id: id.clone(),
                    error: error.to_string(),
                });
                return Err(CheckpointFailed { id, error });
            }
        };
        let took = started.elapsed();
        if !done.pruned.is_empty() {
            self.sweep_snapshots();
        }
        let reply = done.reply(took);
        let t = &reply.timings;
        self.metrics.published(t);
        self.events.record(Event::Checkpoint {
            id: reply.id.clone(),
            scope: reply.scope.len(),
            restarts: reply.restarts.len(),
            timings: *t,
        });
        self.progress.checkpoints += 1;
        self.progress.last_checkpoint = Some((reply.id.clone(), took));
        tracing::info!(
            checkpoint = %reply.id,
            rollouts = reply.scope.len(),
            restarts = reply.restarts.len(),
            total_ms = t.total_ms,
            prepare_ms = t.prepare_ms,
            commit_ms = t.commit_ms,
            publish_ms = t.publish_ms,
            held_ms = t.held_ms,
            resume_ms = t.resume_ms,
            "checkpoint published"
        );
        self.reporter.update(&self.progress);
        Ok(reply)
    }

    /// SIGTERM: the stop checkpoint, but with `grace` only if the last checkpoint's time says
    /// it fits what is left of it, and abandoned (not published: the publish point is its
    /// last step) when it does not finish in time. Either way the run ends (exit 75).
    async fn stop_within(
        mut self,
        received: Instant,
        grace: Option<Duration>,
    ) -> Result<Ending, RunError> {
        let Some(grace) = grace else {
            let id = self.stop(None).await?.id;
            self.stack.shutdown().await;
            return Ok(Ending::Stopped { checkpoint: id });
        };
        let left = grace
            .saturating_sub(received.elapsed())
            .saturating_sub(teardown_margin(grace));
        let estimate = self
            .progress
            .last_checkpoint
            .as_ref()
            .map(|(_, took)| took.mul_f64(1.5));
        let why = match estimate {
            Some(need) if need > left => Some(format!(
                "the stop checkpoint would take about {:.1} s (1.5 x the last one), more than the {:.1} s left of the {:.1} s grace period",
                need.as_secs_f64(),
                left.as_secs_f64(),
                grace.as_secs_f64()
            )),
            _ => match tokio::time::timeout(left, self.stop(None)).await {
                Ok(Ok(done)) => {
                    self.stack.shutdown().await;
                    return Ok(Ending::Stopped {
                        checkpoint: done.id,
                    });
                }
                Ok(Err(e)) => Some(format!("the stop checkpoint failed: {}", e.as_run_error())),
                Err(_) => Some(format!(
                    "the stop checkpoint did not finish within the {:.1} s grace period and was abandoned",
                    grace.as_secs_f64()
                )),
            },
        };
        let why = why.unwrap_or_default();
        let latest = rollpoint_checkpoint::store::latest(&self.run_dir)
            .ok()
            .flatten();
        tracing::warn!(
            why = %why,
            latest = latest.as_deref().unwrap_or("none"),
            "stopping without a stop checkpoint; a resume continues from the newest published one"
        );
        self.events.record(Event::Stopped {
            checkpoint: latest.clone().unwrap_or_default(),
        });
        if let Err(e) = self.stack.backend.destroy_all() {
            tracing::warn!(error = %e, "tearing down sandboxes failed");
        }
        self.reporter.finish(&self.progress);
        self.stack.shutdown().await;
        Ok(Ending::StoppedWithout { latest, why })
    }

    /// A checkpoint that stops the run: everything it could not save is
    /// torn down too.
    pub(crate) async fn stop(
        &mut self,
        id: Option<String>,
    ) -> Result<CheckpointReply, CheckpointFailed> {
        let reply = self.checkpoint(id, true, Duration::ZERO).await?;
        self.events.record(Event::Stopped {
            checkpoint: reply.id.clone(),
        });
        if let Err(e) = self.stack.backend.destroy_all() {
            tracing::warn!(error = %e, "tearing down sandboxes failed");
        }
        self.reporter.finish(&self.progress);
        Ok(reply)
    }

    pub(crate) async fn finished(
        &mut self,
        rollout: String,
        attempt: u32,
        result: Result<RolloutResult, DriverError>,
    ) -> Result<(), RunError> {
        if self.in_flight.get(&rollout).map(AttemptKey::attempt) != Some(attempt) {
            return Ok(());
        }
        let Some(k) = self.in_flight.remove(&rollout) else {
            return Ok(());
        };
        match result {
            Ok(result) if self.retries_infra(&result) => {
                let class = result.infra_class.unwrap_or(InfraClass::Unclassified);
                let error = result.error.clone().unwrap_or_default();
                tracing::warn!(
                    rollout = %rollout,
                    attempt,
                    class = class.as_str(),
                    error = %error,
                    "the infrastructure ended the attempt; it starts again in a fresh sandbox"
                );
                self.events.record(Event::InfraRetry {
                    rollout: rollout.clone(),
                    attempt,
                    class,
                    error,
                });
                self.state
                    .infra_retries
                    .entry(rollout.clone())
                    .or_default()
                    .push(class);
                if let Err(e) = self
                    .stack
                    .coordinator
                    .forget(std::slice::from_ref(&k))
                    .await
                {
                    tracing::warn!(key = %k, error = %e, "forgetting a retried attempt failed");
                }
                let task = self.tasks.get(&rollout).cloned().ok_or_else(|| {
                    RunError::rollout(rollout.clone(), "its task is not known for a retry")
                })?;
                self.start_over(task, attempt).await?;
            }
            Ok(mut result) => {
                if let Some(history) = self.state.infra_retries.get(&rollout) {
                    result.infra_retries.clone_from(history);
                }
                if let Some(f) = self.state.forks.get(&rollout) {
                    result.forked_from = Some(rollpoint_driver::ForkedFrom {
                        rollout: f.from.rollout().as_str().to_owned(),
                        checkpoint: f.checkpoint.clone(),
                        call: f.call.clone(),
                    });
                }
                self.results.append(&result)?;
                self.metrics.result(&result);
                self.progress.done += 1;
                self.progress.in_flight = self.in_flight.len();
                tracing::info!(
                    rollout = %rollout,
                    attempt = result.attempt,
                    status = result.status.as_str(),
                    reward = result.reward,
                    "rollout finished"
                );
                self.reporter.update(&self.progress);
                if let Err(e) = self
                    .stack
                    .coordinator
                    .forget(std::slice::from_ref(&k))
                    .await
                {
                    tracing::warn!(key = %k, error = %e, "forgetting a finished attempt failed");
                }
            }
            Err(e) => {
                tracing::error!(
                    rollout = %rollout,
                    error = %e,
                    "the rollout ended without a result; a resume runs it again"
                );
                self.lost.push(rollout);
            }
        }
        Ok(())
    }

    /// Whether `result` is an infrastructure error `retry_infra` still
    /// covers (forks are not retried: their saved state is gone with them).
    fn retries_infra(&self, result: &RolloutResult) -> bool {
        result.status == rollpoint_driver::Status::InfraError
            && self.tasks.contains_key(&result.rollout)
            && !self.state.forks.contains_key(&result.rollout)
            && self
                .state
                .infra_retries
                .get(&result.rollout)
                .map_or(0, Vec::len)
                < self.state.config.retry_infra as usize
    }

    /// Deletes snapshots no retained checkpoint names (retention pruned
    /// the checkpoints that named them).
    pub(crate) fn sweep_snapshots(&self) {
        let result = retained_checkpoints(&self.run_dir).and_then(|ids| {
            let keep: Vec<&str> = ids.iter().map(String::as_str).collect();
            self.stack
                .backend
                .sweep_snapshots(&keep)
                .map_err(|e| RunError::setup("sweep", e))
        });
        if let Err(e) = result {
            tracing::warn!(error = %e, "sweeping snapshots failed");
        }
    }

    pub(crate) fn show(&mut self) {
        self.count();
        self.reporter.tick(&self.progress);
    }

    pub(crate) fn count(&mut self) {
        let mut queued = 0;
        let mut parked = 0;
        for r in self.in_flight.keys() {
            match self.stack.runs.status(r) {
                Some(RunStatus::Queued) => queued += 1,
                Some(RunStatus::Parked(_)) => parked += 1,
                _ => {}
            }
        }
        self.progress.in_flight = self.in_flight.len();
        self.progress.queued = queued;
        self.progress.parked = parked;
    }

    pub(crate) async fn drive(
        mut self,
        mut signals: mpsc::UnboundedReceiver<Signal>,
        grace: Option<Duration>,
        stop_requested: watch::Receiver<Option<Instant>>,
    ) -> Result<Ending, RunError> {
        self.grace = grace.map(|g| (stop_requested, g));
        let every = self.state.config.checkpoint_every_s;
        let period = Duration::from_secs(every.max(1));
        let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut shown = tokio::time::interval(self.reporter.period());
        let mut signals_open = true;
        while !self.in_flight.is_empty() {
            tokio::select! {
                Some((rollout, attempt, result)) = self.rx.recv() => {
                    self.finished(rollout, attempt, result).await?;
                }
                _ = ticker.tick(), if every > 0 => {
                    match self.checkpoint(None, false, Duration::ZERO).await {
                        Ok(done) => self.branch_by_rule(&done.id, &done.scope, &done.restarts).await,
                        Err(e) => tracing::warn!(error = %RunError::from(e), "checkpoint failed; the run goes on"),
                    }
                }
                signal = signals.recv(), if signals_open => match signal {
                    Some(Signal::Checkpoint) => {
                        match self.checkpoint(None, false, Duration::ZERO).await {
                            Ok(done) => self.branch_by_rule(&done.id, &done.scope, &done.restarts).await,
                            Err(e) => tracing::warn!(error = %RunError::from(e), "checkpoint failed; the run goes on"),
                        }
                    }
                    Some(Signal::Endpoint(EndpointRequest::Checkpoint { request, reply })) => {
                        if request.stop {
                            match self.stop(request.id).await {
                                Ok(done) => {
                                    let id = done.id.clone();
                                    let _asker_gone: Result<(), _> = reply.send(Ok(done));
                                    self.stack.shutdown().await;
                                    return Ok(Ending::Stopped { checkpoint: id });
                                }
                                // Nothing was published and everyone was
                                // resumed: the run goes on.
                                Err(e) => {
                                    tracing::warn!(error = %e.as_run_error(), "stop checkpoint failed; the run goes on");
                                    let _asker_gone: Result<(), _> = reply.send(Err(e.api()));
                                    continue;
                                }
                            }
                        }
                        let answer = self.checkpoint(request.id.clone(), false, request.hold()).await;
                        if let Err(e) = &answer {
                            tracing::warn!(error = %e.as_run_error(), "checkpoint failed; the run goes on");
                        }
                        let done = answer.as_ref().ok().cloned();
                        let _asker_gone: Result<(), _> = reply.send(answer.map_err(|e| e.api()));
                        if let Some(done) = done {
                            self.branch_by_rule(&done.id, &done.scope, &done.restarts).await;
                        }
                    }
                    Some(Signal::Endpoint(EndpointRequest::Record(event))) => {
                        self.events.record(event);
                    }
                    Some(Signal::Endpoint(EndpointRequest::Status { reply })) => {
                        self.count();
                        let _asker_gone: Result<(), _> = reply.send(StatusReport::of(&self.progress));
                    }
                    Some(Signal::Endpoint(EndpointRequest::Fork { request, reply })) => {
                        let answer = self.fork(&request).await.map_err(|e| {
                            tracing::warn!(error = %e, "fork refused");
                            rollpoint_api::ApiError::new(e.fork_refusal_code(), e.to_string())
                        });
                        let _asker_gone: Result<(), _> = reply.send(answer);
                    }
                    Some(Signal::Endpoint(EndpointRequest::FleetPause { request, reply })) => {
                        let answer = self.fleet_pause(request.calls).await;
                        let _asker_gone: Result<(), _> = reply.send(answer);
                    }
                    Some(Signal::Endpoint(EndpointRequest::FleetContinue { request, reply })) => {
                        let answer = self.fleet_continue(request.version).await;
                        let _asker_gone: Result<(), _> = reply.send(answer);
                    }
                    Some(Signal::Endpoint(EndpointRequest::Metrics { reply })) => {
                        self.count();
                        let _asker_gone: Result<(), _> = reply.send(self.metrics.render(&self.progress, &self.stack.owner.counts()));
                    }
                    Some(Signal::Stop(received)) => return self.stop_within(received, grace).await,
                    Some(Signal::Fenced(why)) => {
                        tracing::error!(why = %why, "fenced: another process drives this run now; stopping without a checkpoint");
                        if let Err(e) = self.stack.backend.destroy_all() {
                            tracing::warn!(error = %e, "tearing down sandboxes failed");
                        }
                        self.stack.shutdown().await;
                        return Err(RunError::setup("checkpoint store claim", format!("fenced: {why}")));
                    }
                    None => signals_open = false,
                },
                _ = shown.tick() => self.show(),
            }
        }
        self.show();
        self.reporter.finish(&self.progress);
        let rows = self.progress.done;
        let lost = std::mem::take(&mut self.lost);
        self.stack.shutdown().await;
        if lost.is_empty() {
            self.events.record(Event::Finished { rows });
            Ok(Ending::Finished { rows })
        } else {
            Err(RunError::rollout(
                lost.join(", "),
                "ended without a result; `rollpoint resume` runs them again",
            ))
        }
    }
}
