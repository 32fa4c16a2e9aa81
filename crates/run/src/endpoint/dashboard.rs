//! The live dashboard on the run's control endpoint: `GET /`, the page, served without the
//! token (`rollpoint_view::http`), and behind it the documents the page draws,
//! `GET /v1/run/view` and `GET /v1/rollouts/{id}/view`, and `GET /v1/run/live`, the change
//! stream, whose fingerprint is the drivers' states and the sizes of the files rows, events
//! and model calls are appended to.

use std::path::PathBuf;

use axum::Router;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::response::sse::{Event as SseEvent, Sse};
use axum::routing::get;
use futures_util::stream::Stream;
use rollpoint_api::error::{ApiError, json};
use rollpoint_driver::Runs;
use rollpoint_view::http::{blocking, unknown};
use rollpoint_view::{LiveState, Marks};

use crate::view::{rollout_view, run_view};

/// What the dashboard's routes read: the run directory and the drivers' registry.
#[derive(Debug, Clone)]
pub struct Live {
    pub run_dir: PathBuf,
    pub runs: Runs,
    /// For what a rollout in flight has used so far.
    pub owner: std::sync::Arc<rollpoint_owner::LocalOwner>,
}

impl Live {
    /// Where each rollout the drivers hold stands now.
    #[must_use]
    pub fn state(&self) -> LiveState {
        LiveState::of(&self.runs)
    }
}

/// The page, served without the token (it holds no data).
pub fn page_routes() -> Router {
    rollpoint_view::http::page_route("rollpoint run")
}

/// The documents and the change stream (behind the token).
pub fn routes(live: Live) -> Router {
    Router::new()
        .route("/v1/run/view", get(view))
        .route("/v1/rollouts/{id}/view", get(rollout))
        .route("/v1/run/live", get(changes))
        .with_state(live)
}

#[utoipa::path(
    get,
    path = "/v1/run/view",
    operation_id = "run_view",
    tags = ["run", "agent", "coordinator"],
    responses(
        (status = 200, description = "The run's document (`v`: 1): summary, events, a line per rollout (docs/design/dashboard.md). The run's endpoint reads it from the run directory; an agent serves its own rollouts (no events); the coordinator merges its agents' and adds the checkpoints it took.", body = Object),
        (status = 401, description = rollpoint_api::error::doc::UNAUTHORIZED, body = rollpoint_api::error::ErrorBody),
        (status = 502, description = "The run directory, the ledger or an agent could not be read (`failed`).", body = rollpoint_api::error::ErrorBody),
    ),
    security(("bearer" = [])),
)]
async fn view(State(live): State<Live>) -> Result<Response, ApiError> {
    let state = live.state();
    let dir = live.run_dir.clone();
    let doc = blocking("reading the run's view".to_owned(), move || {
        run_view(&dir, Some(&state))
    })
    .await?;
    Ok(json(StatusCode::OK, &doc))
}

#[utoipa::path(
    get,
    path = "/v1/rollouts/{id}/view",
    operation_id = "rollout_view",
    tags = ["run", "agent", "coordinator"],
    params(("id" = String, Path, description = "The rollout.")),
    responses(
        (status = 200, description = "The rollout's document (`v`: 1): launches, model calls with their messages, checkpoints, output, trajectory. An agent has its calls only with `--gateway` and no output (the sandboxes are the owner's); the coordinator asks the agent that holds the rollout.", body = Object),
        (status = 400, description = rollpoint_api::error::doc::BAD_REQUEST, body = rollpoint_api::error::ErrorBody),
        (status = 401, description = rollpoint_api::error::doc::UNAUTHORIZED, body = rollpoint_api::error::ErrorBody),
        (status = 404, description = "The run knows no such rollout (`not_found`).", body = rollpoint_api::error::ErrorBody),
        (status = 502, description = "The run directory, the ledger or an agent could not be read (`failed`).", body = rollpoint_api::error::ErrorBody),
    ),
    security(("bearer" = [])),
)]
async fn rollout(State(live): State<Live>, Path(id): Path<String>) -> Result<Response, ApiError> {
    rollpoint_proto::key::RolloutId::new(&id).map_err(|e| ApiError::bad("id", e.to_string()))?;
    let one = live.state().rollouts.into_iter().find(|r| r.id == id);
    let session = one.as_ref().and_then(|r| r.session.clone());
    let dir = live.run_dir.clone();
    let asked = id.clone();
    let mut doc = blocking(format!("reading rollout {id}"), move || {
        rollout_view(&dir, &asked, one.as_ref())
    })
    .await?
    .ok_or_else(|| unknown(&id))?;
    // A rollout in flight has no row yet: what its sandbox has used so far, from the owner.
    if let (None, Some(s)) = (&doc.resources, session)
        && let Ok(usage) = rollpoint_owner::Owner::usage(live.owner.as_ref(), &s).await
    {
        doc.resources = serde_json::to_value(usage).ok();
    }
    Ok(json(StatusCode::OK, &doc))
}

/// What changes when the run does: each rollout's state and launch count, and the sizes of
/// the files rows, events and model calls are appended to.
fn fingerprint(live: &Live) -> (Marks, [u64; 3]) {
    let size = |p: PathBuf| std::fs::metadata(p).map_or(0, |m| m.len());
    let files = [
        size(live.run_dir.join(crate::files::results::RESULTS_FILE)),
        size(live.run_dir.join(crate::files::events::EVENTS_FILE)),
        size(
            live.run_dir
                .join(format!("{}-wal", crate::stack::gateway::LEDGER)),
        ) + size(live.run_dir.join(crate::stack::gateway::LEDGER)),
    ];
    (live.state().marks(), files)
}

#[utoipa::path(
    get,
    path = "/v1/run/live",
    operation_id = "run_live",
    tags = ["run", "agent", "coordinator"],
    responses(
        (status = 200, description = "Server-sent events: `changed` (data `{\"v\":1,\"seq\":N}`) whenever the run changed, and a keep-alive comment every 15 s.", content_type = "text/event-stream", body = String),
        (status = 401, description = rollpoint_api::error::doc::UNAUTHORIZED, body = rollpoint_api::error::ErrorBody),
    ),
    security(("bearer" = [])),
)]
async fn changes(
    State(live): State<Live>,
) -> Sse<impl Stream<Item = Result<SseEvent, std::convert::Infallible>>> {
    rollpoint_view::http::changes(move || {
        let now = fingerprint(&live);
        async move { now }
    })
}
