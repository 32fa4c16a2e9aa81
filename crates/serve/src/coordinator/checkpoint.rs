//! `POST /v1/coordinator/checkpoint` (`{v:1, id?, stop?, scope?, hold_ms?}`):
//! takes a checkpoint of every in-flight rollout (or of `scope`) across
//! every participant, optionally holding them paused `hold_ms` after it is
//! published, and replies with its id, per-phase timings and each
//! participant's record count. 409 `busy` while another runs, 409
//! `not_prepared` when a stage did not reach the cut (everyone resumed,
//! nothing published).

use std::sync::Arc;
use std::time::Instant;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use rollpoint_checkpoint::Plan;

use super::{Shared, coordinator_error, fresh_id};
use rollpoint_api::error::{ApiError, json};
use rollpoint_api::wire::CheckpointRequest;
use rollpoint_api::{Body, Versioned};

/// Take a checkpoint of every rollout in flight (or of `scope`).
///
/// Every participant prepares, commits and resumes; with `hold_ms` the rollouts stay
/// paused that long after the checkpoint is published, and with `stop` they are not
/// resumed. The control endpoint of `rollpoint run --listen` serves the same route for the
/// run's own rollouts: there `scope` is refused and `stop` ends the run.
#[utoipa::path(
    post,
    path = "/v1/coordinator/checkpoint",
    operation_id = "coordinator_checkpoint",
    tags = ["coordinator", "run"],
    request_body = CheckpointRequest,
    responses(
        (status = 200, description = "The published checkpoint: its id, scope, timings and each participant's record count.", body = rollpoint_api::wire::CheckpointReply),
        (status = 400, description = rollpoint_api::error::doc::BAD_REQUEST, body = rollpoint_api::error::ErrorBody),
        (status = 401, description = rollpoint_api::error::doc::UNAUTHORIZED, body = rollpoint_api::error::ErrorBody),
        (status = 409, description = "Another checkpoint or restore is in progress (`busy`), a stage did not reach the cut (`not_prepared`: everyone resumed, nothing published), or the id is taken (`conflict`).", body = rollpoint_api::error::ErrorBody),
        (status = 413, description = rollpoint_api::error::doc::TOO_LARGE, body = rollpoint_api::error::ErrorBody),
        (status = 502, description = "A participant failed, or the run is ending (`failed`).", body = rollpoint_api::error::ErrorBody),
    ),
    security(("bearer" = [])),
)]
pub(super) async fn handle(
    State(shared): State<Arc<Shared>>,
    Body(req, _): Versioned<CheckpointRequest>,
) -> Result<Response, ApiError> {
    req.check()?;
    let _held = shared.hold()?;
    let id = req.id.clone().unwrap_or_else(|| fresh_id("ck"));
    let scope = match req.scope.clone() {
        Some(scope) => scope,
        None => shared.in_flight().await?,
    };
    let plan = Plan {
        id,
        scope,
        continues: shared.continues(),
        stop: req.stop,
    };
    let started = Instant::now();
    let done = match shared.coordinator.checkpoint_held(&plan, req.hold()).await {
        Ok(done) => done,
        Err(e) => {
            shared.checkpoints.failed();
            shared.note(serde_json::json!({
                "at_ms": rollpoint_proto::clock::unix_ms(), "kind": "checkpoint_failed",
                "id": plan.id, "error": e.to_string(),
            }));
            return Err(coordinator_error(&e));
        }
    };
    let reply = done.reply(started.elapsed());
    shared.checkpoints.published(&reply.timings);
    let t = &reply.timings;
    shared.note(serde_json::json!({
        "at_ms": rollpoint_proto::clock::unix_ms(), "kind": "checkpoint", "id": reply.id,
        "scope": reply.scope.len(), "restarts": reply.restarts.len(), "total_ms": t.total_ms,
        "prepare_ms": t.prepare_ms, "commit_ms": t.commit_ms, "publish_ms": t.publish_ms,
        "held_ms": t.held_ms, "resume_ms": t.resume_ms,
    }));
    Ok(json(StatusCode::OK, &reply))
}
