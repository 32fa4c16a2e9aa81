//! What feeds the loop of `rollpoint run` and `rollpoint resume` besides its own rollouts:
//! the signals and control requests, the control endpoint to serve, the forks asked for, and
//! the grace period of a stop.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, watch};

use crate::endpoint::start::Listen;
use crate::run_loop::signal::Signal;

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
