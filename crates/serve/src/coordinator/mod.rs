//! `rollpoint serve coordinator`: the checkpoint coordinator over
//! participants on other machines (reached with `HttpParticipant`), driven over
//! HTTP so an RL trainer can own the loop. One route per file:
//!
//! - `POST /v1/coordinator/checkpoint` ([`checkpoint`]);
//! - `POST /v1/coordinator/restore` ([`restore`]);
//! - `GET /v1/coordinator/status` ([`status`]);
//! - `POST /v1/fleet/pause` and `/v1/fleet/continue` ([`fleet`]).
//!
//! Unless the caller names a scope, a checkpoint covers every rollout in
//! flight on every agent, read from the agents' `GET /v1/rollouts`. One
//! checkpoint or restore runs at a time; another asked meanwhile is refused
//! with `busy`, not queued.

mod checkpoint;
mod fleet;
mod fork;
mod restore;
mod status;
mod view;

use prometheus_client::registry::Registry;
use rollpoint_api::metrics::CheckpointMetrics;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::routing::{get, post};
use rollpoint_checkpoint::{Coordinator, CoordinatorConfig, HttpParticipant, Kind, ParticipantApi};

use crate::errors::ServeError;
use rollpoint_api::error::{ApiError, ErrorCode, authorized};
use rollpoint_api::wire::{RolloutList, WIRE_VERSION};
use rollpoint_checkpoint::AttemptKey;

/// The OpenAPI description of the coordinator routes (`GET /metrics` is
/// described apart).
#[derive(Debug, utoipa::OpenApi)]
#[openapi(
    paths(
        checkpoint::handle,
        restore::handle,
        fork::handle,
        status::handle,
        fleet::pause,
        fleet::resume
    ),
    tags((
        name = "coordinator",
        description = "The checkpoint coordinator over HTTP (`rollpoint serve coordinator`), so a \
            trainer can own the loop. One checkpoint or restore runs at a time; another is \
            refused with `busy`. It serves the run's dashboard over its agents. Every route needs \
            the bearer token but `GET /`, the dashboard's page, which holds no data; bodies carry \
            `v: 1` and refuse unknown fields."
    )),
)]
pub struct CoordinatorApi;

/// A participant to drive: its kind as declared and its base URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub kind: Kind,
    pub url: String,
}

impl std::str::FromStr for Target {
    type Err = String;

    /// `model=URL`, `agent=URL` or `resources=URL`.
    fn from_str(s: &str) -> Result<Self, String> {
        let (kind, url) = s
            .split_once('=')
            .ok_or_else(|| format!("{s:?}: expected KIND=URL"))?;
        let kind = match kind {
            "model" => Kind::Model,
            "agent" => Kind::Agent,
            "resources" => Kind::Resources,
            other => {
                return Err(format!(
                    "{other:?}: unknown participant kind (model, agent or resources)"
                ));
            }
        };
        Ok(Self {
            kind,
            url: url.trim_end_matches('/').to_owned(),
        })
    }
}

/// How the coordinator service is set up.
#[derive(Debug, Clone)]
pub struct CoordinatorSettings {
    /// Where checkpoints are published (the participants write there too).
    pub run_dir: PathBuf,
    pub participants: Vec<Target>,
    /// The bearer token of the participants' routes.
    pub participant_token: String,
    /// Published checkpoints kept.
    pub keep: usize,
    /// Each control call's deadline.
    pub timeout: Duration,
    /// The object store checkpoints are published in, besides `run_dir`.
    pub remote: Option<rollpoint_remote::RemoteStore>,
}

/// A participant as discovered.
#[derive(Debug, Clone)]
struct Member {
    kind: Kind,
    instance: String,
    url: String,
    control: Arc<dyn ParticipantApi>,
}

#[derive(Debug)]
struct Shared {
    coordinator: Coordinator,
    members: Vec<Member>,
    run_dir: PathBuf,
    token: String,
    client: reqwest::Client,
    /// Held through a checkpoint or restore.
    busy: tokio::sync::Mutex<()>,
    /// The checkpoint the participants were last restored from.
    continues: Mutex<Option<String>>,
    /// Branch rollouts this coordinator has made, so no number is given out twice.
    branches: Mutex<std::collections::BTreeSet<rollpoint_proto::key::RolloutId>>,
    metrics: Registry,
    checkpoints: CheckpointMetrics,
    /// What the dashboard shows of the run as a whole: each checkpoint taken here.
    history: Mutex<Vec<serde_json::Value>>,
}

/// The coordinator and its routes. Cheap to clone.
#[derive(Debug, Clone)]
pub struct CoordinatorService {
    shared: Arc<Shared>,
}

impl CoordinatorService {
    /// Asks every participant for its kind and instance (refusing one whose
    /// kind is not the declared one) and orders them for prepare.
    pub async fn connect(settings: CoordinatorSettings) -> Result<Self, ServeError> {
        let mut members = Vec::with_capacity(settings.participants.len());
        for target in &settings.participants {
            let control = HttpParticipant::new(&target.url, &settings.participant_token)?;
            let status = rollpoint_checkpoint::ParticipantApi::status(&control)
                .await
                .map_err(|source| ServeError::Participant {
                    url: target.url.clone(),
                    source,
                })?;
            if status.kind != target.kind {
                return Err(ServeError::WrongKind {
                    url: target.url.clone(),
                    declared: target.kind,
                    found: status.kind,
                });
            }
            members.push(Member {
                kind: status.kind,
                instance: status.instance,
                url: target.url.clone(),
                control: Arc::new(control),
            });
        }
        let mut config = CoordinatorConfig::new(&settings.run_dir);
        config.keep = settings.keep;
        config.timeout = settings.timeout;
        config.remote = settings.remote;
        let coordinator = Coordinator::new(
            members.iter().map(|m| Arc::clone(&m.control)).collect(),
            config,
        )
        .await?;
        let client = reqwest::Client::builder()
            .no_proxy()
            .connect_timeout(Duration::from_secs(10))
            .timeout(Duration::from_secs(60))
            .build()
            .map_err(|e| ServeError::Client(e.to_string()))?;
        let mut metrics = Registry::with_prefix("rollpoint_coordinator");
        rollpoint_api::process_metrics::register_process(&mut metrics);
        let checkpoints = CheckpointMetrics::register(&mut metrics);
        Ok(Self {
            shared: Arc::new(Shared {
                coordinator,
                members,
                run_dir: settings.run_dir,
                token: settings.participant_token,
                client,
                busy: tokio::sync::Mutex::new(()),
                continues: Mutex::new(None),
                branches: Mutex::new(std::collections::BTreeSet::new()),
                metrics,
                checkpoints,
                history: Mutex::new(Vec::new()),
            }),
        })
    }

    /// The coordinator routes, every one behind `token`.
    pub fn router(&self, token: &str) -> Router {
        let routes = Router::new()
            .route("/v1/coordinator/checkpoint", post(checkpoint::handle))
            .route("/v1/coordinator/restore", post(restore::handle))
            .route("/v1/coordinator/fork", post(fork::handle))
            .route("/v1/coordinator/status", get(status::handle))
            .route("/v1/fleet/pause", post(fleet::pause))
            .route("/v1/fleet/continue", post(fleet::resume))
            .route("/v1/run/view", get(view::run))
            .route("/v1/rollouts/{id}/view", get(view::rollout))
            .route("/v1/run/live", get(view::live))
            .route(
                "/metrics",
                get(
                    |axum::extract::State(shared): axum::extract::State<Arc<Shared>>| async move {
                        rollpoint_api::metrics::reply(&shared.metrics)
                    },
                ),
            )
            .with_state(Arc::clone(&self.shared));
        rollpoint_view::http::page_route(view::TITLE).merge(authorized(routes, token))
    }
}

impl Shared {
    fn continues(&self) -> Option<String> {
        self.continues
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn set_continues(&self, source: &str) {
        *self
            .continues
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(source.to_owned());
    }

    /// The attempt keys in flight on every agent.
    async fn in_flight(&self) -> Result<Vec<AttemptKey>, ApiError> {
        let mut keys = Vec::new();
        for m in self.agents() {
            let (status, bytes) = self.ask(m, "/v1/rollouts").await?;
            let failed = |e: &dyn std::fmt::Display| {
                ApiError::new(
                    ErrorCode::Failed,
                    format!("agent/{} at {}/v1/rollouts: {e}", m.instance, m.url),
                )
            };
            if !status.is_success() {
                return Err(failed(&format!(
                    "answered {status}: {}",
                    String::from_utf8_lossy(&bytes)
                )));
            }
            let list: RolloutList = rollpoint_proto::decode("rollout list", WIRE_VERSION, &bytes)
                .map_err(|e| failed(&e))?;
            for r in list.rollouts.iter().filter(|r| r.state.in_flight()) {
                keys.push(r.key().map_err(|e| failed(&e))?);
            }
        }
        keys.sort();
        Ok(keys)
    }

    /// The agents among the participants.
    fn agents(&self) -> impl Iterator<Item = &Member> {
        self.members.iter().filter(|m| m.kind == Kind::Agent)
    }

    /// `GET path` of agent `m`: its status and body (an error when it does not answer).
    async fn ask(
        &self,
        m: &Member,
        path: &str,
    ) -> Result<(reqwest::StatusCode, Vec<u8>), ApiError> {
        let url = format!("{}{path}", m.url);
        let failed = |e: &dyn std::fmt::Display| {
            ApiError::new(
                ErrorCode::Failed,
                format!("agent/{} at {url}: {e}", m.instance),
            )
        };
        let reply = self
            .client
            .get(&url)
            .bearer_auth(&self.token)
            .send()
            .await
            .map_err(|e| failed(&e))?;
        let status = reply.status();
        let bytes = reply.bytes().await.map_err(|e| failed(&e))?;
        Ok((status, bytes.to_vec()))
    }

    /// Notes an event for the dashboard's history (`checkpoint`, `checkpoint_failed`).
    fn note(&self, event: serde_json::Value) {
        self.history
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(event);
    }

    /// Holds the coordinator for one checkpoint or restore.
    /// Published checkpoint `id` (the latest when `None`): 404 when there is none.
    async fn published(
        &self,
        id: Option<String>,
    ) -> Result<rollpoint_checkpoint::store::CheckpointDoc, ApiError> {
        use rollpoint_api::error::{ApiError, ErrorCode};
        use rollpoint_checkpoint::store;
        if let Some(remote) = self.coordinator.remote() {
            store::remote::fetch(remote, &self.run_dir)
                .await
                .map_err(|e| ApiError::new(ErrorCode::Failed, e.to_string()))?;
        }
        let run_dir = self.run_dir.clone();
        tokio::task::spawn_blocking(move || {
            let id = match id {
                Some(id) => id,
                None => store::latest(&run_dir)
                    .map_err(|e| ApiError::new(ErrorCode::Failed, e.to_string()))?
                    .ok_or_else(|| {
                        ApiError::new(
                            ErrorCode::NotFound,
                            format!("no checkpoint is published in {}", run_dir.display()),
                        )
                    })?,
            };
            if !store::checkpoint_dir(&run_dir, &id).is_dir() {
                return Err(ApiError::new(
                    ErrorCode::NotFound,
                    format!("no checkpoint {id} in {}", run_dir.display()),
                ));
            }
            store::read_checkpoint(&run_dir, &id)
                .map_err(|e| ApiError::new(ErrorCode::Failed, format!("checkpoint {id}: {e}")))
        })
        .await
        .map_err(|e| ApiError::new(ErrorCode::Failed, format!("read task failed: {e}")))?
    }

    fn hold(&self) -> Result<tokio::sync::MutexGuard<'_, ()>, ApiError> {
        self.busy.try_lock().map_err(|_| {
            ApiError::new(
                ErrorCode::Busy,
                "another checkpoint or restore is in progress",
            )
        })
    }
}

/// `<prefix>-<unix ms>`: a fresh id for a checkpoint or restore.
fn fresh_id(prefix: &str) -> String {
    let ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    format!("{prefix}-{ms}")
}

fn coordinator_error(e: &rollpoint_checkpoint::CoordinatorError) -> ApiError {
    ApiError::from(e)
}
