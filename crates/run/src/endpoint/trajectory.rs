//! `GET /v1/rollouts/{id}/trajectory` (described with the agent's route of the same path):
//! the rollout's trajectory as it stands, read from the ledger file and results.jsonl.

use std::path::PathBuf;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use rollpoint_api::error::{ApiError, ErrorCode, json};

use crate::export::trajectories;

pub(super) async fn trajectory(
    State(run_dir): State<std::sync::Arc<PathBuf>>,
    axum::extract::Path(id): axum::extract::Path<String>,
) -> Result<Response, ApiError> {
    let asked = id.clone();
    let found = rollpoint_view::http::blocking(format!("reading trajectory of {id}"), move || {
        trajectories(&run_dir, Some(&asked))
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
