//! `rollpoint serve agent`: the drivers of one machine as a service. The
//! runs registry and its `agent` participant sit behind the checkpoint
//! control routes (`/v1/checkpoint/...`, as in the embedded default) and
//! behind rollout routes, one verb per file:
//!
//! - `POST /v1/rollouts` ([`submit`]): a `RolloutTask` v1; 202 with the
//!   rollout id and attempt;
//! - `GET /v1/rollouts` ([`list`]): every rollout and where it stands (the
//!   coordinator's default checkpoint scope);
//! - `GET /v1/rollouts/{id}` ([`show`]): the status, or the `RolloutResult`
//!   v1 once done;
//! - `GET /v1/rollouts/{id}/result?wait_ms=N` ([`result`]): long-polls for
//!   the result;
//! - `DELETE /v1/rollouts/{id}` ([`cancel`]): cancels and returns the result.
//!
//! Sandboxes are worked through an owner (usually `HttpOwner`). A finished
//! rollout is forgotten by the control plane once no checkpoint is open
//! ([`forget`]), so later checkpoints no longer carry it; its result stays
//! here.

mod cancel;
mod forget;
mod host;
mod known;
mod list;
mod metrics;
mod result;
mod show;
mod submit;
mod table;
mod trajectory;
mod view;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use axum::Router;
use axum::routing::get;
use futures_util::future::join_all;
use rollpoint_checkpoint::{HostConfig, Participant, ParticipantHost};
use rollpoint_driver::{AgentParticipant, DriverConfig, RolloutTask, RunHandle, RunStatus, Runs};
use rollpoint_owner::Owner;
use rollpoint_proto::key::AttemptKey;

use crate::errors::ServeError;
use forget::Forgetting;
pub use host::AgentHost;
use rollpoint_api::error::{ApiError, ErrorCode, authorized};
use rollpoint_api::wire::{RolloutState, RolloutStatus, WIRE_VERSION};
use table::{Outcome, Seen, Table};

/// The OpenAPI description of the rollout routes (the checkpoint control
/// routes and `GET /metrics` are described apart).
#[derive(Debug, utoipa::OpenApi)]
#[openapi(
    paths(
        submit::handle,
        list::handle,
        show::handle,
        result::handle,
        cancel::handle,
        trajectory::handle,
    ),
    tags((
        name = "agent",
        description = "The drivers of one machine (`rollpoint serve agent`): rollouts submitted, \
            listed, awaited and cancelled, and its dashboard. It also serves the checkpoint control \
            routes as the agent participant. Every route needs the bearer token but `GET /`, the \
            dashboard's page, which holds no data."
    )),
)]
pub struct AgentApi;

/// How an agent service is set up.
#[derive(Debug, Clone)]
pub struct AgentSettings {
    /// The run directory checkpoints are written under (shared with the
    /// coordinator and the other participants).
    pub run_dir: PathBuf,
    /// This agent's instance name among the run's agents.
    pub instance: String,
    /// Rollouts holding a slot (seeding, running or parked) at once.
    pub slots: usize,
    /// Added to every harness's environment (the task's own values win).
    pub env: BTreeMap<String, String>,
    /// The gateway's control routes, where trajectories read their calls.
    pub gateway: Option<rollpoint_gateway::GatewayClient>,
    /// What a token break does to a trajectory.
    pub token_breaks: rollpoint_trajectory::Breaks,
    /// The object store each checkpoint's share is uploaded to.
    pub remote: Option<rollpoint_remote::RemoteStore>,
    /// The run's route key: launches carry their attempt's route secret.
    pub route_key: Option<rollpoint_proto::route::RouteKey>,
}

/// What the routes and the control wrapper share.
#[derive(Debug)]
pub(crate) struct Shared {
    runs: Runs,
    participant: Arc<AgentParticipant>,
    table: Table,
    env: BTreeMap<String, String>,
    /// The participant's own control plane.
    local: ParticipantHost,
    /// Attempt keys of finished rollouts, for the control plane to forget.
    forgetting: Forgetting,
    gateway: Option<rollpoint_gateway::GatewayClient>,
    token_breaks: rollpoint_trajectory::Breaks,
}

/// The drivers of this machine, with their control plane and rollout
/// routes. Cheap to clone.
#[derive(Debug, Clone)]
pub struct AgentService {
    shared: Arc<Shared>,
    control: Arc<AgentHost>,
}

impl AgentService {
    /// Starts the drivers over `owner`. Must run inside a tokio runtime
    /// (each run is a task).
    pub fn new(owner: Arc<dyn Owner>, settings: AgentSettings) -> Result<Self, ServeError> {
        let runs = Runs::new(
            owner,
            DriverConfig {
                slots: settings.slots,
                route_key: settings.route_key.clone(),
                ..DriverConfig::default()
            },
        )?;
        let participant = Arc::new(AgentParticipant::new(runs.clone(), &settings.instance));
        let mut host = HostConfig::new(&settings.run_dir);
        host.remote = settings.remote.clone();
        let local = ParticipantHost::new(Arc::clone(&participant) as Arc<dyn Participant>, host)?;
        let shared = Arc::new(Shared {
            runs,
            participant,
            table: Table::default(),
            env: settings.env,
            local,
            forgetting: Forgetting::default(),
            gateway: settings.gateway,
            token_breaks: settings.token_breaks,
        });
        let control = Arc::new(AgentHost::new(Arc::clone(&shared)));
        Ok(Self { shared, control })
    }

    /// The checkpoint control plane of these drivers (kind agent).
    pub fn control(&self) -> Arc<AgentHost> {
        Arc::clone(&self.control)
    }

    /// The rollout routes and the checkpoint control routes, every one
    /// behind `token`.
    pub fn router(&self, token: &str) -> Router {
        let rollouts = Router::new()
            .route("/v1/rollouts", get(list::handle).post(submit::handle))
            .route(
                "/v1/rollouts/{id}",
                get(show::handle).delete(cancel::handle),
            )
            .route("/v1/rollouts/{id}/result", get(result::handle))
            .route("/v1/rollouts/{id}/trajectory", get(trajectory::handle))
            .route("/v1/run/view", get(view::run))
            .route("/v1/rollouts/{id}/view", get(view::rollout))
            .route("/v1/run/live", get(view::live))
            .route("/metrics", get(metrics::handle))
            .with_state(Arc::clone(&self.shared));
        rollpoint_view::http::page_route(view::TITLE)
            .merge(authorized(rollouts, token))
            .merge(rollpoint_checkpoint::router(
                Arc::clone(&self.control) as Arc<dyn rollpoint_checkpoint::ParticipantApi>,
                token,
            ))
    }

    /// Starts `task` as attempt 0.
    pub fn submit(&self, task: RolloutTask) -> Result<RolloutStatus, ApiError> {
        self.shared.submit(task)
    }

    /// Cancels every rollout still in flight (their launches are killed
    /// and their sessions closed) before the service ends.
    pub async fn shutdown(&self) {
        let active: Vec<String> = self
            .shared
            .table
            .list()
            .into_iter()
            .filter(|(_, seen)| seen.outcome.is_none())
            .map(|(rollout, _)| rollout)
            .collect();
        join_all(active.iter().map(|r| self.shared.runs.cancel(r))).await;
    }
}

impl Shared {
    fn submit(self: &Arc<Self>, task: RolloutTask) -> Result<RolloutStatus, ApiError> {
        let rollout = task.rollout().to_owned();
        if !self.table.claim(&rollout) {
            return Err(ApiError::new(
                ErrorCode::Conflict,
                format!("rollout {rollout} is already known here (running or finished)"),
            ));
        }
        let task = task.with_env(&self.env);
        match self.runs.register(task) {
            Ok(handle) => {
                self.watch(handle, 0);
                let seen = self.seen(&rollout)?;
                Ok(self.status(&rollout, &seen))
            }
            Err(e) => {
                self.table.release(&rollout);
                Err(match e {
                    rollpoint_driver::DriverError::Task { field, message } => {
                        ApiError::bad(field, message)
                    }
                    rollpoint_driver::DriverError::Duplicate { .. } => {
                        ApiError::new(ErrorCode::Conflict, e.to_string())
                    }
                    other => ApiError::new(ErrorCode::Failed, other.to_string()),
                })
            }
        }
    }

    /// Waits for the run of `attempt` in the background and records its
    /// outcome.
    fn watch(self: &Arc<Self>, handle: RunHandle, attempt: u32) {
        let shared = Arc::clone(self);
        tokio::spawn(async move {
            let rollout = handle.rollout.clone();
            let outcome = match handle.result().await {
                Ok(result) => Outcome::Done(Arc::new(result)),
                Err(e) => Outcome::Lost(e.to_string()),
            };
            let done = matches!(outcome, Outcome::Done(_));
            // The rollout ran from a checked task, so its key is valid.
            if shared.table.finish(&rollout, attempt, outcome)
                && done
                && let Ok(key) = AttemptKey::of(&rollout, attempt)
                && let Some(keys) = shared.forgetting.finished(key)
            {
                shared.forgetting.flush(&shared.local, keys).await;
            }
        });
    }

    /// Takes over the runs a restore installed, as the attempts `restored`
    /// names.
    fn adopt_installed(self: &Arc<Self>, restored: &[AttemptKey]) {
        let next: BTreeMap<&str, u32> = restored
            .iter()
            .map(|k| (k.rollout().as_str(), k.attempt()))
            .collect();
        for handle in self.participant.take_installed() {
            let attempt = next
                .get(handle.rollout.as_str())
                .copied()
                .unwrap_or_default();
            self.table.adopt(&handle.rollout, attempt);
            self.watch(handle, attempt);
        }
    }

    /// Marks attempts about to be retired, so how their runs end (a
    /// cancel) is not taken for their results.
    fn retiring(&self, keys: &[AttemptKey]) {
        for k in keys {
            self.table.retire(k.rollout().as_str(), k.attempt());
        }
    }

    fn status(&self, rollout: &str, seen: &Seen) -> RolloutStatus {
        let (state, error) = match &seen.outcome {
            Some(Outcome::Done(_)) => (RolloutState::Done, None),
            Some(Outcome::Lost(e)) => (RolloutState::Lost, Some(e.clone())),
            None if seen.retired => (RolloutState::Retired, None),
            None => (
                match self.runs.status(rollout) {
                    Some(RunStatus::Queued) => RolloutState::Queued,
                    Some(RunStatus::Parked(_)) => RolloutState::Parked,
                    Some(RunStatus::Running | RunStatus::Done) | None => RolloutState::Running,
                },
                None,
            ),
        };
        RolloutStatus {
            v: WIRE_VERSION,
            rollout: rollout.to_owned(),
            attempt: seen.attempt,
            state,
            error,
        }
    }
}

fn unknown(rollout: &str) -> ApiError {
    ApiError::new(ErrorCode::NotFound, format!("no rollout {rollout} here"))
}
