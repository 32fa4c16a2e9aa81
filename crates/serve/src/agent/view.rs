//! The agent's dashboard: `GET /` (the page, without the token), and behind the token
//! `GET /v1/run/view` (every rollout this agent holds: its result once it has one, else
//! where its driver stands), `GET /v1/rollouts/{id}/view` (with its calls and trajectory from
//! the gateway's ledger when the agent has `--gateway`) and `GET /v1/run/live`. An agent keeps
//! no events of the run (the coordinator's dashboard has its checkpoints) and no harness
//! output (the sandboxes are the owner's).

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use axum::response::sse::{Event, Sse};
use futures_util::stream::Stream;
use rollpoint_api::error::{ApiError, ErrorCode, json};
use rollpoint_driver::RolloutResult;
use rollpoint_view::{
    LiveState, Marks, RolloutLine, RolloutParts, RunView, VIEW_VERSION, calls_by_rollout,
    groups_view, summarize_rows,
};

use super::Shared;
use super::known::Known;
use super::table::Outcome;

/// The documents' title.
pub(super) const TITLE: &str = "rollpoint agent";

/// Each rollout's result, or why its run ended without one, and where the live ones stand.
fn holdings(shared: &Shared) -> (Vec<RolloutResult>, Vec<RolloutLine>) {
    let live = LiveState::of(&shared.runs);
    let mut rows = Vec::new();
    let mut lines = Vec::new();
    // Where the driver stands, else `state` with nothing known yet.
    let line = |id: &str, attempt: u32, state: &'static str| match live
        .rollouts
        .iter()
        .find(|l| l.id == id)
    {
        Some(l) => RolloutLine::from(l),
        None => RolloutLine::from(&rollpoint_view::LiveRollout {
            id: id.to_owned(),
            attempt,
            state,
            started_ms: None,
            launches: Vec::new(),
            session: None,
        }),
    };
    for (id, seen) in shared.table.list() {
        match seen.outcome {
            Some(Outcome::Done(r)) => {
                lines.push(RolloutLine::from(r.as_ref()));
                rows.push(RolloutResult::clone(&r));
            }
            Some(Outcome::Lost(why)) => {
                let mut lost = line(&id, seen.attempt, "lost");
                "lost".clone_into(&mut lost.state);
                lost.error = Some(why);
                lines.push(lost);
            }
            None => lines.push(line(&id, seen.attempt, "queued")),
        }
    }
    (rows, lines)
}

/// The agent's rollouts.
pub(super) async fn run(State(shared): State<Arc<Shared>>) -> Response {
    let (rows, lines) = holdings(&shared);
    let mut summary = summarize_rows(&rows, &lines);
    summary.tasks = lines.len();
    let doc = RunView {
        v: VIEW_VERSION,
        title: TITLE.to_owned(),
        live: true,
        generated_ms: rollpoint_proto::clock::unix_ms(),
        summary,
        groups: groups_view(&rows),
        events: Vec::new(),
        rollouts: lines,
    };
    json(StatusCode::OK, &doc)
}

/// One rollout of this agent in full.
pub(super) async fn rollout(
    State(shared): State<Arc<Shared>>,
    Known { id, seen }: Known,
) -> Result<Response, ApiError> {
    let row = match &seen.outcome {
        Some(Outcome::Done(r)) => Some(Arc::clone(r)),
        _ => None,
    };
    let live = LiveState::of(&shared.runs)
        .rollouts
        .into_iter()
        .find(|l| l.id == id);
    let records = match &shared.gateway {
        Some(gateway) => gateway
            .records(&id)
            .await
            .map_err(|e| ApiError::new(ErrorCode::Failed, format!("rollout {id}: {e}")))?,
        None => Vec::new(),
    };
    let trajectory = shared.gateway.as_ref().map(|_| {
        let outcome = row.as_deref().map(rollpoint_trajectory::Outcome::of);
        rollpoint_trajectory::build(&id, &records, outcome.as_ref(), shared.token_breaks)
    });
    let doc = RolloutParts {
        row: row.as_deref(),
        live: live.as_ref(),
        calls: calls_by_rollout(&records).remove(&id).unwrap_or_default(),
        checkpoints: Vec::new(),
        output: Vec::new(),
        trajectory: trajectory.as_ref(),
    }
    .build(&id);
    Ok(json(StatusCode::OK, &doc))
}

/// What changes when the agent's rollouts do: where each stands, and which have ended.
fn fingerprint(shared: &Shared) -> (Marks, Vec<(String, bool)>) {
    let ended = shared
        .table
        .list()
        .into_iter()
        .map(|(id, seen)| (id, seen.outcome.is_some()))
        .collect();
    (LiveState::of(&shared.runs).marks(), ended)
}

/// When the agent's rollouts change (server-sent events).
pub(super) async fn live(
    State(shared): State<Arc<Shared>>,
) -> Sse<impl Stream<Item = Result<Event, std::convert::Infallible>>> {
    rollpoint_view::http::changes(move || {
        let now = fingerprint(&shared);
        async move { now }
    })
}
