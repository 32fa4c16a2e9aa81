//! `GET /v1/coordinator/status`: the latest published checkpoint, the one
//! last restored, whether a checkpoint is running, and every participant
//! with its phase (or why it did not answer).

use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use futures_util::future::join_all;
use rollpoint_checkpoint::store;

use super::Shared;
use rollpoint_api::error::{ApiError, ErrorCode, json};
use rollpoint_api::wire::{CoordinatorStatus, PeerStatus, WIRE_VERSION};

/// How long one participant may take to answer.
const PEER_TIMEOUT: Duration = Duration::from_secs(10);

/// The latest checkpoint, the one last restored, and every participant's phase.
#[utoipa::path(
    get,
    path = "/v1/coordinator/status",
    operation_id = "coordinator_status",
    tags = ["coordinator"],
    responses(
        (status = 200, description = "The coordinator's state and its participants (a participant that did not answer names why).", body = rollpoint_api::wire::CoordinatorStatus),
        (status = 401, description = rollpoint_api::error::doc::UNAUTHORIZED, body = rollpoint_api::error::ErrorBody),
        (status = 502, description = "The checkpoint store could not be read (`failed`).", body = rollpoint_api::error::ErrorBody),
    ),
    security(("bearer" = [])),
)]
pub(super) async fn handle(State(shared): State<Arc<Shared>>) -> Result<Response, ApiError> {
    let run_dir = shared.run_dir.clone();
    let latest = tokio::task::spawn_blocking(move || store::latest(&run_dir))
        .await
        .map_err(|e| ApiError::new(ErrorCode::Failed, format!("read task failed: {e}")))?
        .map_err(|e| ApiError::new(ErrorCode::Failed, e.to_string()))?;
    let peers = join_all(shared.members.iter().map(|m| async move {
        let answer = tokio::time::timeout(PEER_TIMEOUT, m.control.status()).await;
        let mut peer = PeerStatus {
            kind: m.kind,
            instance: m.instance.clone(),
            url: m.url.clone(),
            phase: None,
            checkpoint: None,
            error: None,
        };
        match answer {
            Ok(Ok(s)) => {
                peer.phase = Some(s.phase);
                peer.checkpoint = s.checkpoint;
            }
            Ok(Err(e)) => peer.error = Some(e.to_string()),
            Err(_) => {
                peer.error = Some(format!("no answer within {} s", PEER_TIMEOUT.as_secs()));
            }
        }
        peer
    }))
    .await;
    let reply = CoordinatorStatus {
        v: WIRE_VERSION,
        latest,
        continues: shared.continues(),
        busy: shared.busy.try_lock().is_err(),
        peers,
    };
    Ok(json(StatusCode::OK, &reply))
}
