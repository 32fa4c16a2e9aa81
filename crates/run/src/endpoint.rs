//! The run's control endpoint: a trainer, a test or an operator asks the
//! running loop for a checkpoint over HTTP and gets its id and timings back,
//! instead of sending SIGUSR1 and reading stderr. The checkpoint route and
//! its bodies are the HTTP coordinator's (`rollpoint serve coordinator`,
//! crates/serve), so a trainer drives either the same way; a checkpoint may
//! hold every rollout paused for a while after it is published, so a frozen
//! rollout can be inspected. `stop` ends the run after the checkpoint, as
//! SIGTERM does.
//!
//! The handler does not touch the coordinator itself: it hands the request
//! to the loop, which owns the coordinator and the in-flight set, and
//! waits for the loop's answer.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use rollpoint_api::error::{ApiError, ErrorCode, authorized, json, versioned};
use rollpoint_api::wire::{
    CheckpointReply, CheckpointRequest, FleetContinueRequest, FleetPauseRequest, FleetReport,
    ForkReply, ForkRequest, WIRE_VERSION,
};
use serde::{Deserialize, Serialize};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot};

use crate::errors::RunError;
use crate::progress::Progress;

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

/// Version of `control.json` and of the status reply.
pub const ENDPOINT_VERSION: u32 = 1;
/// Where a run with a control endpoint writes its address.
pub const CONTROL_FILE: &str = "control.json";

/// `GET /v1/run/status`: where the run stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[schema(as = RunStatusReport)]
#[serde(deny_unknown_fields)]
pub struct StatusReport {
    pub v: u32,
    pub total: usize,
    pub done: usize,
    pub in_flight: usize,
    pub queued: usize,
    pub parked: usize,
    pub checkpoints: u32,
    pub last_checkpoint: Option<String>,
    pub last_checkpoint_ms: Option<u64>,
}

impl StatusReport {
    pub(crate) fn of(p: &Progress) -> Self {
        Self {
            v: ENDPOINT_VERSION,
            total: p.total,
            done: p.done,
            in_flight: p.in_flight,
            queued: p.queued,
            parked: p.parked,
            checkpoints: p.checkpoints,
            last_checkpoint: p.last_checkpoint.as_ref().map(|(id, _)| id.clone()),
            last_checkpoint_ms: p
                .last_checkpoint
                .as_ref()
                .map(|(_, d)| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
        }
    }
}

/// What a control request asks of the loop.
#[derive(Debug)]
pub enum EndpointRequest {
    /// A checkpoint (checked already: no `scope`, the hold within bounds).
    Checkpoint {
        request: CheckpointRequest,
        reply: oneshot::Sender<Result<CheckpointReply, ApiError>>,
    },
    Status {
        reply: oneshot::Sender<StatusReport>,
    },
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
    Record(crate::events::Event),
}

/// `control.json`: where the endpoint listens.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EndpointFile {
    pub v: u32,
    pub addr: SocketAddr,
}

impl EndpointFile {
    pub fn path(run_dir: &Path) -> PathBuf {
        run_dir.join(CONTROL_FILE)
    }

    /// Reads `control.json`, rejecting an unknown version by name.
    pub fn load(run_dir: &Path) -> Result<Self, RunError> {
        let path = Self::path(run_dir);
        let bytes = std::fs::read(&path).map_err(|e| RunError::io(&path, e))?;
        rollpoint_proto::decode("run control file", ENDPOINT_VERSION, &bytes)
            .map_err(|e| RunError::state(path, e))
    }

    fn save(&self, run_dir: &Path) -> Result<(), RunError> {
        let path = Self::path(run_dir);
        let bytes =
            serde_json::to_vec_pretty(self).map_err(|e| RunError::state(path.clone(), e))?;
        crate::state::write_atomic(&path, &bytes)
    }
}

/// The OpenAPI description of the run's own routes (its checkpoint route is the
/// coordinator's, and `GET /metrics` is described with every service's).
#[derive(Debug, utoipa::OpenApi)]
#[openapi(
    paths(
        status,
        crate::exec::exec,
        crate::dashboard::view,
        crate::dashboard::rollout,
        crate::dashboard::changes,
        crate::shell::shell
    ),
    tags((
        name = "run",
        description = "The control endpoint of `rollpoint run` (its address is in \
            `RUN_DIR/control.json`): the run's status, a checkpoint on request, forks of \
            a checkpointed rollout, and each rollout's trajectory (as the agent's route of the \
            same path), the dashboard's documents and change stream, and a command or a terminal in a \
            live rollout's sandbox. Every route needs the bearer token but `GET /`, the \
            dashboard's page, which holds no data."
    )),
)]
pub struct RunApi;

/// Where and how the run serves its control endpoint.
#[derive(Debug, Clone)]
pub struct Listen {
    pub addr: SocketAddr,
    pub token: String,
    /// The loop's input, where requests are handed over.
    pub loop_tx: mpsc::UnboundedSender<Signal>,
}

/// What the dashboard and exec routes read directly (never the coordinator): the drivers'
/// registry and the owner.
#[derive(Debug, Clone)]
pub(crate) struct Reach {
    pub runs: rollpoint_driver::Runs,
    pub owner: std::sync::Arc<rollpoint_owner::LocalOwner>,
    pub backend: std::sync::Arc<rollpoint_sandbox::local::LocalBackend>,
}

/// The control endpoint while it serves; dropping it stops serving.
#[derive(Debug)]
pub(crate) struct Serving {
    task: tokio::task::JoinHandle<()>,
    file: PathBuf,
}

impl Drop for Serving {
    fn drop(&mut self) {
        self.task.abort();
        let _gone_already: std::io::Result<()> = std::fs::remove_file(&self.file);
    }
}

/// Binds the address, records it in `RUN_DIR/control.json`, and serves the
/// control routes, handing requests to the loop.
pub(crate) async fn start(
    run_dir: &Path,
    listen: Listen,
    reach: Reach,
) -> Result<Serving, RunError> {
    let Listen {
        addr,
        token,
        loop_tx,
    } = listen;
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|e| RunError::setup("control endpoint", format!("bind {addr}: {e}")))?;
    let bound = listener
        .local_addr()
        .map_err(|e| RunError::setup("control endpoint", format!("address of {addr}: {e}")))?;
    EndpointFile {
        v: ENDPOINT_VERSION,
        addr: bound,
    }
    .save(run_dir)?;
    let live = crate::dashboard::Live {
        run_dir: run_dir.to_owned(),
        runs: reach.runs,
        owner: reach.owner,
    };
    let exec = crate::exec::ExecContext {
        live: live.clone(),
        record: {
            let tx = loop_tx.clone();
            std::sync::Arc::new(move |event| {
                let _loop_gone = tx.send(Signal::Endpoint(EndpointRequest::Record(event)));
            })
        },
    };
    let guarded = authorized(
        Router::new()
            .route("/v1/coordinator/checkpoint", post(checkpoint))
            .route("/v1/coordinator/fork", post(fork))
            .route("/v1/run/status", get(status))
            .route("/v1/fleet/pause", post(fleet_pause))
            .route("/v1/fleet/continue", post(fleet_continue))
            .route("/metrics", get(metrics))
            .with_state(loop_tx)
            .merge(
                Router::new()
                    .route("/v1/rollouts/{id}/trajectory", get(trajectory))
                    .with_state(std::sync::Arc::new(run_dir.to_owned())),
            )
            .merge(crate::dashboard::routes(live))
            .merge(crate::exec::routes(exec.clone()))
            .merge(crate::shell::routes(exec, reach.backend)),
        &token,
    );
    let app = crate::dashboard::page_routes().merge(guarded);
    let task = tokio::spawn(async move {
        if let Err(e) = rollpoint_api::serve(listener, app).await {
            tracing::error!(address = %bound, error = %e, "the control endpoint stopped");
        }
    });
    Ok(Serving {
        task,
        file: EndpointFile::path(run_dir),
    })
}

fn ending() -> Response {
    ApiError::new(ErrorCode::Failed, "the run is ending").into_response()
}

async fn checkpoint(
    State(loop_tx): State<mpsc::UnboundedSender<Signal>>,
    body: Body,
) -> Result<Response, ApiError> {
    let request: CheckpointRequest =
        versioned("coordinator checkpoint request", WIRE_VERSION, body).await?;
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
async fn fork(
    State(loop_tx): State<mpsc::UnboundedSender<Signal>>,
    body: Body,
) -> Result<Response, ApiError> {
    let request: ForkRequest = versioned("fork request", WIRE_VERSION, body).await?;
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
async fn fleet_pause(
    State(loop_tx): State<mpsc::UnboundedSender<Signal>>,
    body: Body,
) -> Result<Response, ApiError> {
    let request: FleetPauseRequest = versioned("fleet pause request", WIRE_VERSION, body).await?;
    let (reply, answer) = oneshot::channel();
    ask_loop(
        &loop_tx,
        EndpointRequest::FleetPause { request, reply },
        answer,
    )
    .await
}

/// `POST /v1/fleet/continue` (described with the coordinator's route of the same path).
async fn fleet_continue(
    State(loop_tx): State<mpsc::UnboundedSender<Signal>>,
    body: Body,
) -> Result<Response, ApiError> {
    let request: FleetContinueRequest =
        versioned("fleet continue request", WIRE_VERSION, body).await?;
    request.check()?;
    let (reply, answer) = oneshot::channel();
    ask_loop(
        &loop_tx,
        EndpointRequest::FleetContinue { request, reply },
        answer,
    )
    .await
}

/// Where the run stands: its tasks, what is in flight, its checkpoints.
/// `GET /v1/rollouts/{id}/trajectory` (described with the agent's route of the same path):
/// the rollout's trajectory as it stands, read from the ledger file and results.jsonl.
async fn trajectory(
    State(run_dir): State<std::sync::Arc<PathBuf>>,
    axum::extract::Path(id): axum::extract::Path<String>,
) -> Result<Response, ApiError> {
    let asked = id.clone();
    let found = rollpoint_view::http::blocking(format!("reading trajectory of {id}"), move || {
        crate::export::trajectories(&run_dir, Some(&asked))
    })
    .await?;
    match found.into_iter().next() {
        Some(t) => Ok(json(StatusCode::OK, &t)),
        None => Err(ApiError::new(
            ErrorCode::NotFound,
            format!("no rollout {id} made a model call or has a result in this run"),
        )),
    }
}

#[utoipa::path(
    get,
    path = "/v1/run/status",
    operation_id = "run_status",
    tag = "run",
    responses(
        (status = 200, description = "The run's counts and its latest checkpoint.", body = StatusReport),
        (status = 401, description = rollpoint_api::error::doc::UNAUTHORIZED, body = rollpoint_api::error::ErrorBody),
        (status = 502, description = "The run is ending (`failed`).", body = rollpoint_api::error::ErrorBody),
    ),
    security(("bearer" = [])),
)]
async fn status(State(loop_tx): State<mpsc::UnboundedSender<Signal>>) -> Response {
    let (reply, answer) = oneshot::channel();
    if loop_tx
        .send(Signal::Endpoint(EndpointRequest::Status { reply }))
        .is_err()
    {
        return ending();
    }
    match answer.await {
        Ok(report) => json(StatusCode::OK, &report),
        Err(_) => ending(),
    }
}

async fn metrics(State(loop_tx): State<mpsc::UnboundedSender<Signal>>) -> Response {
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
