//! `POST /v1/coordinator/restore` (`{v:1, id?, scope?}`): retires the
//! saved attempts everywhere, restores a published checkpoint (the latest
//! when `id` is absent) on every participant as the next attempts, then
//! resumes them; the restore itself is all or nothing. With `moves`, the
//! rollouts of participants that are gone (a lost node) continue on live
//! ones of the same kind, from the checkpoint store; without `scope`, the
//! attempts the moved agents held.
//! Later checkpoints record that they continue it. 404 when there is no
//! such checkpoint; 409 `busy` while another checkpoint or restore runs;
//! 422 `unprocessable` naming `moves[i].from` (or `.to`) for a move from a
//! participant that did not write to the checkpoint or is still here (or to
//! one not here), before anything is changed.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;

use super::{Shared, fresh_id};
use rollpoint_api::error::{ApiError, json};
use rollpoint_api::wire::check_id;
use rollpoint_api::wire::{RestoreReply, RestoreRequest, RestoredMember, WIRE_VERSION};
use rollpoint_api::{Body, Versioned};
use rollpoint_checkpoint::{Kind, Move};

/// Restore a published checkpoint on every participant and resume it.
///
/// The saved attempts are retired everywhere first, then continue as the next attempts;
/// the restore itself is all or nothing.
#[utoipa::path(
    post,
    path = "/v1/coordinator/restore",
    operation_id = "coordinator_restore",
    tags = ["coordinator"],
    request_body = RestoreRequest,
    responses(
        (status = 200, description = "Restored and resumed everywhere.", body = rollpoint_api::wire::RestoreReply),
        (status = 400, description = rollpoint_api::error::doc::BAD_REQUEST, body = rollpoint_api::error::ErrorBody),
        (status = 401, description = rollpoint_api::error::doc::UNAUTHORIZED, body = rollpoint_api::error::ErrorBody),
        (status = 404, description = "No such checkpoint, or none is published (`not_found`).", body = rollpoint_api::error::ErrorBody),
        (status = 409, description = "Another checkpoint or restore is in progress (`busy`), or the participants differ from the checkpoint's (`conflict`).", body = rollpoint_api::error::ErrorBody),
        (status = 413, description = rollpoint_api::error::doc::TOO_LARGE, body = rollpoint_api::error::ErrorBody),
        (status = 422, description = "A move names a participant that did not write to the checkpoint or is still here, or one not here to take its share over (`unprocessable`, naming `moves[i].from` or `moves[i].to`); nothing was changed.", body = rollpoint_api::error::ErrorBody),
        (status = 502, description = "A participant failed (`failed`).", body = rollpoint_api::error::ErrorBody),
    ),
    security(("bearer" = [])),
)]
pub(super) async fn handle(
    State(shared): State<Arc<Shared>>,
    Body(req, _): Versioned<RestoreRequest>,
) -> Result<Response, ApiError> {
    check_id(req.id.as_deref())?;
    let _held = shared.hold()?;
    let doc = shared.published(req.id.clone()).await?;
    let moves: Vec<Move> = req
        .moves
        .iter()
        .map(|m| Move {
            kind: m.kind,
            from: m.from.clone(),
            to: m.to.clone(),
        })
        .collect();
    // A move naming a participant that is not there is refused before any
    // attempt is retired.
    shared.coordinator.check_moves(&doc, &moves)?;
    let scope = match req.scope {
        Some(scope) => scope,
        None if moves.is_empty() => doc.scope.clone(),
        None => {
            let mut keys = Vec::new();
            for m in moves.iter().filter(|m| m.kind == Kind::Agent) {
                keys.extend(shared.coordinator.keys_of(&doc.id, m.kind, &m.from).await?);
            }
            keys
        }
    };
    // The attempts saved (and any earlier) end everywhere first: a
    // participant that outlived them still runs them, and the gateway
    // fences their keys.
    if !scope.is_empty() {
        shared.coordinator.retire(&scope).await?;
    }
    let id = fresh_id("restore");
    let restored = shared
        .coordinator
        .restore_moved(&id, &doc.id, &scope, &moves)
        .await?;
    shared.set_continues(&doc.id);
    shared.coordinator.resume(&id).await?;
    let reply = RestoreReply {
        v: WIRE_VERSION,
        id,
        source: doc.id,
        restored: restored
            .restored
            .into_iter()
            .map(|(kind, instance, keys)| RestoredMember {
                kind,
                instance,
                keys,
            })
            .collect(),
    };
    Ok(json(StatusCode::OK, &reply))
}
