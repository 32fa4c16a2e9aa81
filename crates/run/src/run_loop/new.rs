//! The loop's state, made once per process: the stack it drives, the run's state, the
//! result and event logs, the rollouts in flight, the progress shown and the metrics.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use rollpoint_driver::{DriverError, RolloutResult, RolloutTask};
use rollpoint_owner::Owner as _;
use rollpoint_proto::key::AttemptKey;
use tokio::sync::{mpsc, watch};

use super::metrics::RunMetrics;
use super::progress::{Progress, Reporter};
use crate::errors::RunError;
use crate::files::events::EventLog;
use crate::files::results::ResultsLog;
use crate::files::state::RunState;
use crate::stack::build::Stack;

/// A rollout's attempt that came back: rollout, attempt, its result.
type Finished = (String, u32, Result<RolloutResult, DriverError>);

/// What the one task that drives the run owns.
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
    pub(crate) metrics: RunMetrics,
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
        let metrics = RunMetrics::new(&stack.runs.pause_metrics(), move || {
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
}
