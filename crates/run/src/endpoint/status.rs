//! `GET /v1/run/status`: where the run stands, as the loop counts it.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use rollpoint_api::error::json;
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, oneshot};

use super::ask::ending;
use super::file::ENDPOINT_VERSION;
use crate::run_loop::progress::Progress;
use crate::run_loop::signal::{EndpointRequest, Signal};

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
    fn of(p: &Progress) -> Self {
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
pub(super) async fn status(State(loop_tx): State<mpsc::UnboundedSender<Signal>>) -> Response {
    let (reply, answer) = oneshot::channel();
    if loop_tx
        .send(Signal::Endpoint(EndpointRequest::Status { reply }))
        .is_err()
    {
        return ending();
    }
    match answer.await {
        Ok(progress) => json(StatusCode::OK, &StatusReport::of(&progress)),
        Err(_) => ending(),
    }
}
