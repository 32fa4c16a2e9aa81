//! `POST /v1/coordinator/fork` (`{v:1, checkpoint, rollout, n}`): `n` new rollouts
//! `<rollout>~<i>`, each made on every participant from what the published checkpoint saved
//! of `rollout`, then resumed; all or nothing, as a restore. The branch numbers are the lowest
//! this coordinator has not given out for that rollout (and not in the checkpoint). The
//! agent takes the branches over as rollouts of its own (`GET /v1/rollouts/<rollout>~<i>`).

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use rollpoint_api::error::{ApiError, ErrorCode, json};
use rollpoint_api::wire::{ForkReply, ForkRequest, WIRE_VERSION};
use rollpoint_api::{Body, Versioned};
use rollpoint_checkpoint::store::Unforkable;
use rollpoint_proto::key::{AttemptKey, RolloutId};

use super::{Shared, fresh_id};

/// Fork a rollout of a published checkpoint into `n` new rollouts on every participant.
///
/// Each branch `<rollout>~<i>` gets the rollout's sandbox forked from its snapshot, its
/// bookmark and session, and its ledger prefix; the source is not disturbed. The control
/// endpoint of `rollpoint run --listen` serves the same route for the run's own rollouts:
/// there the branches become rollouts of the run, pinned by a checkpoint at once.
#[utoipa::path(
    post,
    path = "/v1/coordinator/fork",
    operation_id = "coordinator_fork",
    tags = ["coordinator", "run"],
    request_body = ForkRequest,
    responses(
        (status = 200, description = "The branches, installed and resumed everywhere.", body = ForkReply),
        (status = 400, description = rollpoint_api::error::doc::BAD_REQUEST, body = rollpoint_api::error::ErrorBody),
        (status = 401, description = rollpoint_api::error::doc::UNAUTHORIZED, body = rollpoint_api::error::ErrorBody),
        (status = 404, description = "No such checkpoint, or the rollout is not in it (`not_found`).", body = rollpoint_api::error::ErrorBody),
        (status = 409, description = "Another checkpoint or restore is in progress (`busy`), or the rollout could not be saved there (`conflict`).", body = rollpoint_api::error::ErrorBody),
        (status = 502, description = "A participant failed (`failed`).", body = rollpoint_api::error::ErrorBody),
    ),
    security(("bearer" = [])),
)]
pub(super) async fn handle(
    State(shared): State<Arc<Shared>>,
    Body(req, _): Versioned<ForkRequest>,
) -> Result<Response, ApiError> {
    req.check()?;
    let _held = shared.hold()?;
    let rollout =
        RolloutId::new(&req.rollout).map_err(|e| ApiError::bad("rollout", e.to_string()))?;
    let doc = shared.published(Some(req.checkpoint.clone())).await?;
    let from = doc.forkable(&rollout).map_err(|e| {
        let code = match e {
            Unforkable::NotSaved { .. } => ErrorCode::NotFound,
            Unforkable::Restart { .. } => ErrorCode::Conflict,
        };
        ApiError::new(code, e.to_string())
    })?;
    let to = shared.branch_keys(&from, &doc.scope, req.n)?;
    let fork_id = fresh_id("fork");
    shared
        .coordinator
        .fork(&fork_id, &doc.id, &from, &to)
        .await?;
    shared.coordinator.resume(&fork_id).await?;
    let reply = ForkReply {
        v: WIRE_VERSION,
        checkpoint: doc.id,
        rollout: rollout.as_str().to_owned(),
        from,
        branches: to.iter().map(|k| k.rollout().as_str().to_owned()).collect(),
    };
    Ok(json(StatusCode::OK, &reply))
}

impl Shared {
    /// `n` branch keys of `from`: the lowest numbers not given out before by this coordinator
    /// and not in `scope`, at `from`'s attempt.
    fn branch_keys(
        &self,
        from: &AttemptKey,
        scope: &[AttemptKey],
        n: u32,
    ) -> Result<Vec<AttemptKey>, ApiError> {
        let mut given = self
            .branches
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let branches = from
            .rollout()
            .free_branches(n as usize, |b| {
                given.contains(b) || scope.iter().any(|k| k.rollout() == b)
            })
            .map_err(|e| ApiError::bad("rollout", e.to_string()))?;
        given.extend(branches.iter().cloned());
        Ok(branches
            .into_iter()
            .map(|b| AttemptKey::new(b, from.attempt()))
            .collect())
    }
}
