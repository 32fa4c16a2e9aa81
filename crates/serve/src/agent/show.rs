//! `GET /v1/rollouts/{id}`: the `RolloutResult` v1 once the rollout is
//! done, its status before (or when its run was lost); 404 for an unknown
//! id.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;

use super::table::Outcome;
use super::{Shared, unknown};
use rollpoint_api::error::{ApiError, json};

pub(super) async fn handle(
    State(shared): State<Arc<Shared>>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let seen = shared.table.get(&id).ok_or_else(|| unknown(&id))?;
    Ok(match &seen.outcome {
        Some(Outcome::Done(result)) => json(StatusCode::OK, result.as_ref()),
        _ => json(StatusCode::OK, &shared.status(&id, &seen)),
    })
}
