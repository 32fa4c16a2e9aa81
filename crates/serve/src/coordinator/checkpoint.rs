//! `POST /v1/coordinator/checkpoint` (`{v:1, id?, stop?, scope?}`): takes a
//! checkpoint of every in-flight rollout (or of `scope`) across every
//! participant and replies with its id, per-phase timings and each
//! participant's record count. 409 `busy` while another runs, 409
//! `not_prepared` when a stage did not reach the cut (everyone resumed,
//! nothing published).

use std::sync::Arc;
use std::time::Instant;

use axum::body::Body;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use rollpoint_checkpoint::Plan;

use super::{Shared, check_request, coordinator_error, fresh_id, millis};
use crate::http::{ApiError, json, versioned};
use crate::wire::{CheckpointReply, CheckpointRequest, MemberRecords, PhaseTimings, WIRE_VERSION};

pub(super) async fn handle(
    State(shared): State<Arc<Shared>>,
    body: Body,
) -> Result<Response, ApiError> {
    let req: CheckpointRequest =
        versioned("coordinator checkpoint request", WIRE_VERSION, body).await?;
    check_request(req.id.as_deref(), req.scope.as_deref())?;
    let _held = shared.hold()?;
    let id = req.id.unwrap_or_else(|| fresh_id("ck"));
    let scope = match req.scope {
        Some(scope) => scope,
        None => shared.in_flight().await?,
    };
    let plan = Plan {
        id: id.clone(),
        scope,
        continues: shared.continues(),
        stop: req.stop,
    };
    let started = Instant::now();
    let done = shared
        .coordinator
        .checkpoint(&plan)
        .await
        .map_err(|e| coordinator_error(&e))?;
    let t = done.timings;
    let reply = CheckpointReply {
        v: WIRE_VERSION,
        id,
        scope: done.doc.scope,
        restarts: done.doc.restarts,
        timings: PhaseTimings {
            prepare_ms: millis(t.prepare),
            commit_ms: millis(t.commit),
            publish_ms: millis(t.publish),
            resume_ms: millis(t.resume),
            total_ms: millis(started.elapsed()),
        },
        participants: done
            .doc
            .participants
            .iter()
            .map(|m| MemberRecords {
                kind: m.kind,
                instance: m.instance.clone(),
                record_count: m.manifest.record_count,
            })
            .collect(),
        pruned: done.pruned,
    };
    Ok(json(StatusCode::OK, &reply))
}
