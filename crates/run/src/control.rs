//! The run's control endpoint: a trainer, a test or an operator asks the
//! running loop for a checkpoint over HTTP and gets its id and timings back,
//! instead of sending SIGUSR1 and reading stderr. A checkpoint may be asked
//! to hold every rollout paused for a while after it is published, so a
//! frozen rollout can be inspected.
//!
//! The handler does not touch the coordinator itself: it hands the request
//! to the loop, which owns the coordinator and the in-flight set, and
//! waits for the loop's answer.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use rollpoint_checkpoint::auth::BearerToken;
use serde::{Deserialize, Serialize};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot};

use crate::controller::Signal;
use crate::errors::RunError;
use crate::progress::Progress;

/// Version of the control bodies and of `control.json`.
pub const CONTROL_VERSION: u32 = 1;
/// Where a run with a control endpoint writes its address.
pub const CONTROL_FILE: &str = "control.json";
/// The longest hold a checkpoint may ask for: well under the participants'
/// lease, so none of them resumes on its own while held.
pub const MAX_HOLD_MS: u64 = 300_000;

/// `POST /v1/coordinator/checkpoint`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckpointBody {
    pub v: u32,
    /// Keep every rollout paused this long after publishing.
    #[serde(default)]
    pub hold_ms: u64,
}

/// The reply to a checkpoint: the published id and where the time went.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckpointReport {
    pub v: u32,
    pub id: String,
    /// Attempt keys the checkpoint saved.
    pub scope: Vec<String>,
    /// Attempt keys some participant could not save (they start over).
    pub restarts: Vec<String>,
    pub prepare_ms: u64,
    pub commit_ms: u64,
    pub publish_ms: u64,
    pub held_ms: u64,
    pub resume_ms: u64,
}

/// `GET /v1/coordinator/status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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
            v: CONTROL_VERSION,
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
pub enum ControlRequest {
    Checkpoint {
        hold: Duration,
        reply: oneshot::Sender<Result<CheckpointReport, String>>,
    },
    Status {
        reply: oneshot::Sender<StatusReport>,
    },
}

/// `control.json`: where the endpoint listens.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ControlFile {
    pub v: u32,
    pub addr: SocketAddr,
}

impl ControlFile {
    pub fn path(run_dir: &Path) -> PathBuf {
        run_dir.join(CONTROL_FILE)
    }

    /// Reads `control.json`, rejecting an unknown version by name.
    pub fn load(run_dir: &Path) -> Result<Self, RunError> {
        let path = Self::path(run_dir);
        let bytes = std::fs::read(&path).map_err(|e| RunError::io(&path, e))?;
        rollpoint_proto::decode("run control file", CONTROL_VERSION, &bytes).map_err(|e| {
            RunError::State {
                path,
                message: e.to_string(),
            }
        })
    }

    fn save(&self, run_dir: &Path) -> Result<(), RunError> {
        let path = Self::path(run_dir);
        let bytes = serde_json::to_vec_pretty(self).map_err(|e| RunError::State {
            path: path.clone(),
            message: e.to_string(),
        })?;
        crate::state::write_atomic(&path, &bytes)
    }
}

#[derive(Clone)]
struct Ctx {
    loop_tx: mpsc::UnboundedSender<Signal>,
}

/// Where and how the run serves its control endpoint.
#[derive(Debug, Clone)]
pub struct Listen {
    pub addr: SocketAddr,
    pub token: String,
    /// The loop's input, where requests are handed over.
    pub loop_tx: mpsc::UnboundedSender<Signal>,
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
pub(crate) async fn start(run_dir: &Path, listen: Listen) -> Result<Serving, RunError> {
    let Listen {
        addr,
        token,
        loop_tx,
    } = listen;
    let token = token.as_str();
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|e| RunError::setup("control endpoint", format!("bind {addr}: {e}")))?;
    let bound = listener
        .local_addr()
        .map_err(|e| RunError::setup("control endpoint", format!("address of {addr}: {e}")))?;
    ControlFile {
        v: CONTROL_VERSION,
        addr: bound,
    }
    .save(run_dir)?;
    let app = router(token, loop_tx);
    let task = tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            eprintln!("rollpoint: control endpoint on {bound}: {e}");
        }
    });
    Ok(Serving {
        task,
        file: ControlFile::path(run_dir),
    })
}

fn router(token: &str, loop_tx: mpsc::UnboundedSender<Signal>) -> Router {
    let expected = Arc::new(BearerToken::new(token));
    Router::new()
        .route("/v1/coordinator/checkpoint", post(checkpoint))
        .route("/v1/coordinator/status", get(status))
        .with_state(Ctx { loop_tx })
        .layer(axum::middleware::from_fn_with_state(expected, authorize))
}

async fn authorize(State(expected): State<Arc<BearerToken>>, req: Request, next: Next) -> Response {
    if expected.admits(req.headers()) {
        next.run(req).await
    } else {
        problem(
            StatusCode::UNAUTHORIZED,
            "missing or wrong bearer token".to_owned(),
        )
    }
}

fn json(status: StatusCode, body: &impl Serialize) -> Response {
    match serde_json::to_vec(body) {
        Ok(bytes) => (
            status,
            [(axum::http::header::CONTENT_TYPE, "application/json")],
            bytes,
        )
            .into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

fn problem(status: StatusCode, error: String) -> Response {
    json(status, &serde_json::json!({ "error": error }))
}

fn gone() -> Response {
    problem(
        StatusCode::SERVICE_UNAVAILABLE,
        "the run is ending".to_owned(),
    )
}

async fn checkpoint(State(ctx): State<Ctx>, body: Bytes) -> Response {
    let body: CheckpointBody =
        match rollpoint_proto::decode("checkpoint request", CONTROL_VERSION, &body) {
            Ok(b) => b,
            Err(e) => return problem(StatusCode::BAD_REQUEST, e.to_string()),
        };
    if body.hold_ms > MAX_HOLD_MS {
        return problem(
            StatusCode::BAD_REQUEST,
            format!(
                "hold_ms: {} is over the limit of {MAX_HOLD_MS}",
                body.hold_ms
            ),
        );
    }
    let (reply, answer) = oneshot::channel();
    let req = ControlRequest::Checkpoint {
        hold: Duration::from_millis(body.hold_ms),
        reply,
    };
    if ctx.loop_tx.send(Signal::Control(req)).is_err() {
        return gone();
    }
    match answer.await {
        Ok(Ok(report)) => json(StatusCode::OK, &report),
        Ok(Err(e)) => problem(StatusCode::CONFLICT, e),
        Err(_) => gone(),
    }
}

async fn status(State(ctx): State<Ctx>) -> Response {
    let (reply, answer) = oneshot::channel();
    if ctx
        .loop_tx
        .send(Signal::Control(ControlRequest::Status { reply }))
        .is_err()
    {
        return gone();
    }
    match answer.await {
        Ok(report) => json(StatusCode::OK, &report),
        Err(_) => gone(),
    }
}
