//! The run's dashboard on the coordinator: `GET /` (the page, without the token), and behind
//! the token `GET /v1/run/view` (its agents' documents as one, with the checkpoints taken
//! here as the run's events), `GET /v1/rollouts/{id}/view` (asked of the agent that holds the
//! rollout, with the checkpoints taken while it was in flight) and `GET /v1/run/live` (a
//! change when any agent's rollouts or this coordinator's checkpoints change).

use std::collections::BTreeMap;
use std::sync::{Arc, PoisonError};

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::response::sse::{Event, Sse};
use futures_util::stream::Stream;
use rollpoint_api::error::{ApiError, ErrorCode, json};
use rollpoint_view::{CheckpointMark, RolloutView, RunView, Summary, VIEW_VERSION};
use serde_json::Value;

use super::Shared;

/// The documents' title.
pub(super) const TITLE: &str = "rollpoint coordinator";

/// A document an agent answered, decoded; an error naming the agent otherwise.
fn decode<T: serde::de::DeserializeOwned>(
    what: &'static str,
    instance: &str,
    bytes: &[u8],
) -> Result<T, ApiError> {
    rollpoint_proto::decode(what, VIEW_VERSION, bytes).map_err(|e| {
        ApiError::new(
            ErrorCode::Failed,
            format!("agent/{instance} answered a {what} this coordinator cannot read: {e}"),
        )
    })
}

fn history(shared: &Shared) -> Vec<Value> {
    shared
        .history
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone()
}

/// Sums `b` into `a`: counts added, maps merged, the mean reward weighted by rows.
fn add(a: &mut Summary, b: Summary) {
    let weighted = |s: &Summary| s.reward_mean.unwrap_or(0.0) * s.rewarded as f64;
    let sum = weighted(a) + weighted(&b);
    for (k, v) in b.states {
        *a.states.entry(k).or_default() += v;
    }
    for (k, v) in b.infra_errors {
        *a.infra_errors.entry(k).or_default() += v;
    }
    a.tasks += b.tasks;
    a.done += b.done;
    a.rewarded += b.rewarded;
    a.prompt_tokens += b.prompt_tokens;
    a.completion_tokens += b.completion_tokens;
    a.model_calls += b.model_calls;
    a.launches += b.launches;
    a.cpu_ms = match (a.cpu_ms, b.cpu_ms) {
        (None, None) => None,
        (x, y) => Some(x.unwrap_or(0) + y.unwrap_or(0)),
    };
    a.memory_peak_bytes = a.memory_peak_bytes.max(b.memory_peak_bytes);
    a.trusted.extend(b.trusted);
    a.reward_mean = (a.rewarded > 0).then(|| sum / a.rewarded as f64);
}

/// The run across the agents.
pub(super) async fn run(State(shared): State<Arc<Shared>>) -> Result<Response, ApiError> {
    let mut summary = Summary::default();
    let mut rollouts = Vec::new();
    for m in shared.agents() {
        let (status, bytes) = shared.ask(m, "/v1/run/view").await?;
        if !status.is_success() {
            return Err(ApiError::new(
                ErrorCode::Failed,
                format!(
                    "agent/{} answered {status} for its view: {}",
                    m.instance,
                    String::from_utf8_lossy(&bytes)
                ),
            ));
        }
        let doc: RunView = decode("run view", &m.instance, &bytes)?;
        add(&mut summary, doc.summary);
        rollouts.extend(doc.rollouts);
    }
    let events = history(&shared);
    summary.checkpoints = events.iter().filter(|e| e["kind"] == "checkpoint").count();
    summary.checkpoints_failed = events
        .iter()
        .filter(|e| e["kind"] == "checkpoint_failed")
        .count();
    let doc = RunView {
        v: VIEW_VERSION,
        title: TITLE.to_owned(),
        live: true,
        generated_ms: rollpoint_proto::clock::unix_ms(),
        summary,
        groups: None,
        events,
        rollouts,
    };
    Ok(json(StatusCode::OK, &doc))
}

/// One rollout, from the agent that holds it.
pub(super) async fn rollout(
    State(shared): State<Arc<Shared>>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    rollpoint_proto::key::RolloutId::new(&id).map_err(|e| ApiError::bad("id", e.to_string()))?;
    for m in shared.agents() {
        let (status, bytes) = shared.ask(m, &format!("/v1/rollouts/{id}/view")).await?;
        if status == reqwest::StatusCode::NOT_FOUND {
            continue;
        }
        if !status.is_success() {
            return Err(ApiError::new(
                ErrorCode::Failed,
                format!(
                    "agent/{} answered {status} for rollout {id}: {}",
                    m.instance,
                    String::from_utf8_lossy(&bytes)
                ),
            ));
        }
        let mut doc: RolloutView = decode("rollout view", &m.instance, &bytes)?;
        let started = doc.launches.first().map(|l| l.start_ms);
        let ended = doc
            .result
            .as_ref()
            .and_then(|r| r.pointer("/timings/ended_at_ms"))
            .and_then(Value::as_u64);
        doc.checkpoints = history(&shared)
            .iter()
            .filter(|e| e["kind"] == "checkpoint")
            .filter_map(|e| {
                let at_ms = e["at_ms"].as_u64()?;
                (started.is_some_and(|s| at_ms >= s) && ended.is_none_or(|t| at_ms <= t)).then(
                    || CheckpointMark {
                        id: e["id"].as_str().unwrap_or_default().to_owned(),
                        at_ms,
                    },
                )
            })
            .collect();
        return Ok(json(StatusCode::OK, &doc));
    }
    Err(rollpoint_view::http::unknown(&id))
}

/// What changes when the run does: every agent's list of rollouts, and the checkpoints here.
async fn fingerprint(shared: &Shared) -> (BTreeMap<String, Vec<u8>>, usize) {
    let mut lists = BTreeMap::new();
    for m in shared.agents() {
        let list = shared
            .ask(m, "/v1/rollouts")
            .await
            .map(|(_, body)| body)
            .unwrap_or_default();
        lists.insert(m.instance.clone(), list);
    }
    let checkpoints = shared
        .history
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .len();
    (lists, checkpoints)
}

/// When the run changes (server-sent events).
pub(super) async fn live(
    State(shared): State<Arc<Shared>>,
) -> Sse<impl Stream<Item = Result<Event, std::convert::Infallible>>> {
    rollpoint_view::http::changes(move || {
        let shared = Arc::clone(&shared);
        async move { fingerprint(&shared).await }
    })
}
