//! The loop's input: what the signal handlers, the claim's heartbeat and the control
//! endpoint ask of it. Each request over the endpoint carries the channel its answer goes
//! back on.

use rollpoint_api::ApiError;
use rollpoint_api::wire::{
    CheckpointReply, CheckpointRequest, FleetContinueRequest, FleetPauseRequest, FleetReport,
    ForkReply, ForkRequest,
};
use tokio::sync::oneshot;

use super::progress::Progress;
use crate::files::events::Event;

/// What the signal handlers and the control endpoint ask of the loop.
#[derive(Debug)]
pub enum Signal {
    /// Checkpoint, then continue (SIGUSR1).
    Checkpoint,
    /// Checkpoint with stop, then end (SIGTERM, SIGINT), received at this instant.
    Stop(std::time::Instant),
    /// Another process took the run over (its claim on the checkpoint store is newer): end
    /// at once, publishing nothing.
    Fenced(String),
    /// A request over the control endpoint.
    Endpoint(EndpointRequest),
}

/// What a control request asks of the loop.
#[derive(Debug)]
pub enum EndpointRequest {
    /// A checkpoint (checked already: no `scope`, the hold within bounds).
    Checkpoint {
        request: CheckpointRequest,
        reply: oneshot::Sender<Result<CheckpointReply, ApiError>>,
    },
    /// The loop's counts, for the run's status.
    Status { reply: oneshot::Sender<Progress> },
    /// The run's metrics as OpenMetrics text.
    Metrics { reply: oneshot::Sender<String> },
    /// A fork (checked already).
    Fork {
        request: ForkRequest,
        reply: oneshot::Sender<Result<ForkReply, ApiError>>,
    },
    /// A fleet pause for a weight update.
    FleetPause {
        request: FleetPauseRequest,
        reply: oneshot::Sender<Result<FleetReport, ApiError>>,
    },
    /// The fleet continues (checked already).
    FleetContinue {
        request: FleetContinueRequest,
        reply: oneshot::Sender<Result<FleetReport, ApiError>>,
    },
    /// An event for the run's events file (an operator's exec).
    Record(Event),
}
