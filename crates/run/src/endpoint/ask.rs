//! The control routes that hand a request to the loop and answer with what it says: a
//! checkpoint, a fork, the fleet's pause and continue, the metrics. The handlers never touch
//! the coordinator themselves: the loop owns it and the rollouts in flight.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use rollpoint_api::error::{ApiError, ErrorCode, json};
use rollpoint_api::extract::{Body, Versioned};
use rollpoint_api::wire::{
    CheckpointRequest, FleetContinueRequest, FleetPauseRequest, ForkRequest,
};
use serde::Serialize;
use tokio::sync::{mpsc, oneshot};

use crate::run_loop::signal::{EndpointRequest, Signal};

pub(super) fn ending() -> Response {
    ApiError::new(ErrorCode::Failed, "the run is ending").into_response()
}

pub(super) async fn checkpoint(
    State(loop_tx): State<mpsc::UnboundedSender<Signal>>,
    Body(request, _): Versioned<CheckpointRequest>,
) -> Result<Response, ApiError> {
    request.check()?;
    if request.scope.is_some() {
        return Err(ApiError::bad(
            "scope",
            "a run checkpoints every rollout in flight; it takes no scope",
        ));
    }
    let (reply, answer) = oneshot::channel();
    ask_loop(
        &loop_tx,
        EndpointRequest::Checkpoint { request, reply },
        answer,
    )
    .await
}

/// Forks a rollout of a published checkpoint into `n` new rollouts of the run (described
/// with the coordinator's route of the same path).
pub(super) async fn fork(
    State(loop_tx): State<mpsc::UnboundedSender<Signal>>,
    Body(request, _): Versioned<ForkRequest>,
) -> Result<Response, ApiError> {
    request.check()?;
    let (reply, answer) = oneshot::channel();
    ask_loop(&loop_tx, EndpointRequest::Fork { request, reply }, answer).await
}

/// Hands `asked` to the loop and answers with what it says.
async fn ask_loop<T: Serialize>(
    loop_tx: &mpsc::UnboundedSender<Signal>,
    asked: EndpointRequest,
    answer: oneshot::Receiver<Result<T, ApiError>>,
) -> Result<Response, ApiError> {
    if loop_tx.send(Signal::Endpoint(asked)).is_err() {
        return Ok(ending());
    }
    match answer.await {
        Ok(Ok(report)) => Ok(json(StatusCode::OK, &report)),
        Ok(Err(e)) => Err(e),
        Err(_) => Ok(ending()),
    }
}

/// `POST /v1/fleet/pause` (described with the coordinator's route of the same path).
pub(super) async fn fleet_pause(
    State(loop_tx): State<mpsc::UnboundedSender<Signal>>,
    Body(request, _): Versioned<FleetPauseRequest>,
) -> Result<Response, ApiError> {
    let (reply, answer) = oneshot::channel();
    ask_loop(
        &loop_tx,
        EndpointRequest::FleetPause { request, reply },
        answer,
    )
    .await
}

/// `POST /v1/fleet/continue` (described with the coordinator's route of the same path).
pub(super) async fn fleet_continue(
    State(loop_tx): State<mpsc::UnboundedSender<Signal>>,
    Body(request, _): Versioned<FleetContinueRequest>,
) -> Result<Response, ApiError> {
    request.check()?;
    let (reply, answer) = oneshot::channel();
    ask_loop(
        &loop_tx,
        EndpointRequest::FleetContinue { request, reply },
        answer,
    )
    .await
}

pub(super) async fn metrics(State(loop_tx): State<mpsc::UnboundedSender<Signal>>) -> Response {
    let (reply, answer) = oneshot::channel();
    if loop_tx
        .send(Signal::Endpoint(EndpointRequest::Metrics { reply }))
        .is_err()
    {
        return ending();
    }
    match answer.await {
        Ok(text) => (
            [(
                axum::http::header::CONTENT_TYPE,
                rollpoint_api::metrics::OPENMETRICS,
            )],
            text,
        )
            .into_response(),
        Err(_) => ending(),
    }
}
