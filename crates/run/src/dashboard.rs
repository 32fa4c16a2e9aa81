//! The live dashboard on the run's control endpoint: `GET /` is the page (code only: it holds
//! no data, so it is served without the token, and asks for the token itself), and behind the
//! bearer token the documents it draws, `GET /v1/run/view` and `GET /v1/rollouts/{id}/view`,
//! and `GET /v1/run/live`, server-sent events saying when the run changed so the page
//! refetches (at most once a second, whatever the number of rollouts).

use std::convert::Infallible;
use std::path::PathBuf;
use std::time::Duration;

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use futures_util::stream::Stream;
use rollpoint_api::error::{ApiError, ErrorCode, json};
use rollpoint_driver::Runs;

use crate::view::{LiveRollout, LiveState, Mode, render, rollout_view, run_view};

/// What the dashboard's routes read: the run directory and the drivers' registry.
#[derive(Debug, Clone)]
pub struct Live {
    pub run_dir: PathBuf,
    pub runs: Runs,
}

impl Live {
    /// Where each rollout the drivers hold stands now.
    #[must_use]
    pub fn state(&self) -> LiveState {
        LiveState {
            rollouts: self
                .runs
                .states()
                .into_iter()
                .map(|(id, status, bookmark)| LiveRollout {
                    id,
                    attempt: bookmark.attempt,
                    state: LiveRollout::state_of(&status),
                    started_ms: Some(bookmark.started_at_ms),
                    launches: bookmark
                        .progress()
                        .map(|p| p.launches.clone())
                        .unwrap_or_default(),
                })
                .collect(),
        }
    }
}

/// The page, served without the token (it holds no data).
pub fn page_routes() -> Router {
    Router::new().route("/", get(page))
}

/// The documents and the change stream (behind the token).
pub fn routes(live: Live) -> Router {
    Router::new()
        .route("/v1/run/view", get(view))
        .route("/v1/rollouts/{id}/view", get(rollout))
        .route("/v1/run/live", get(changes))
        .with_state(live)
}

async fn page() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        render("rollpoint run", Mode::Live),
    )
        .into_response()
}

/// Runs `read` on a blocking thread (it reads files and the ledger); a failure is `failed`,
/// its message prefixed with `what`.
pub(crate) async fn blocking<T: Send + 'static>(
    what: String,
    read: impl FnOnce() -> Result<T, crate::errors::RunError> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(read)
        .await
        .map_err(|e| ApiError::new(ErrorCode::Failed, format!("{what}: {e}")))?
        .map_err(|e| ApiError::new(ErrorCode::Failed, format!("{what}: {e}")))
}

#[utoipa::path(
    get,
    path = "/v1/run/view",
    operation_id = "run_view",
    tag = "run",
    responses(
        (status = 200, description = "The run's document (`v`: 1): summary, events, a line per rollout; docs/design/dashboard.md.", body = Object),
        (status = 401, description = rollpoint_api::error::doc::UNAUTHORIZED, body = rollpoint_api::error::ErrorBody),
        (status = 502, description = "The run directory could not be read (`failed`).", body = rollpoint_api::error::ErrorBody),
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
    tag = "run",
    params(("id" = String, Path, description = "The rollout.")),
    responses(
        (status = 200, description = "The rollout's document (`v`: 1): launches, model calls with their messages, checkpoints, output, trajectory.", body = Object),
        (status = 400, description = rollpoint_api::error::doc::BAD_REQUEST, body = rollpoint_api::error::ErrorBody),
        (status = 401, description = rollpoint_api::error::doc::UNAUTHORIZED, body = rollpoint_api::error::ErrorBody),
        (status = 404, description = "The run knows no such rollout (`not_found`).", body = rollpoint_api::error::ErrorBody),
        (status = 502, description = "The run directory could not be read (`failed`).", body = rollpoint_api::error::ErrorBody),
    ),
    security(("bearer" = [])),
)]
async fn rollout(State(live): State<Live>, Path(id): Path<String>) -> Result<Response, ApiError> {
    rollpoint_proto::key::RolloutId::new(&id).map_err(|e| ApiError::bad("id", e.to_string()))?;
    let state = live.state();
    let one = state.rollouts.into_iter().find(|r| r.id == id);
    let dir = live.run_dir.clone();
    let asked = id.clone();
    let doc = blocking(format!("reading rollout {id}"), move || {
        rollout_view(&dir, &asked, one.as_ref())
    })
    .await?;
    match doc {
        Some(doc) => Ok(json(StatusCode::OK, &doc)),
        None => Err(ApiError::new(
            ErrorCode::NotFound,
            format!("rollout {id} is not part of this run"),
        )),
    }
}

/// What changes when the run does: each rollout's state and launch count, and the sizes of
/// the files rows, events and model calls are appended to.
fn fingerprint(live: &Live) -> (Vec<(String, &'static str, usize)>, [u64; 3]) {
    let mut states: Vec<_> = live
        .state()
        .rollouts
        .into_iter()
        .map(|r| (r.id, r.state, r.launches.len()))
        .collect();
    states.sort();
    let size = |p: PathBuf| std::fs::metadata(p).map_or(0, |m| m.len());
    let files = [
        size(live.run_dir.join(crate::results::RESULTS_FILE)),
        size(live.run_dir.join(crate::events::EVENTS_FILE)),
        size(live.run_dir.join(format!("{}-wal", crate::gateway::LEDGER)))
            + size(live.run_dir.join(crate::gateway::LEDGER)),
    ];
    (states, files)
}

#[utoipa::path(
    get,
    path = "/v1/run/live",
    operation_id = "run_live",
    tag = "run",
    responses(
        (status = 200, description = "Server-sent events: `changed` (data `{\"v\":1,\"seq\":N}`) whenever the run changed, and a keep-alive comment every 15 s.", content_type = "text/event-stream", body = String),
        (status = 401, description = rollpoint_api::error::doc::UNAUTHORIZED, body = rollpoint_api::error::ErrorBody),
    ),
    security(("bearer" = [])),
)]
async fn changes(
    State(live): State<Live>,
) -> Sse<impl Stream<Item = Result<SseEvent, Infallible>>> {
    let stream = futures_util::stream::unfold((live, None, 0u64), |(live, last, seq)| async move {
        let mut last = last;
        loop {
            let now = fingerprint(&live);
            if last.as_ref() != Some(&now) {
                let seq = seq + 1;
                let event = SseEvent::default().event("changed").data(format!(
                    "{{\"v\":{},\"seq\":{seq}}}",
                    crate::view::VIEW_VERSION
                ));
                return Some((Ok(event), (live, Some(now), seq)));
            }
            last = Some(now);
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    });
    Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
}
