//! Builds the embedded default: every participant in this process. The
//! scripted model (when the config names a script) or an upstream, the
//! gateway on 127.0.0.1 as the `model` participant, the local sandboxes and
//! their owner as `resources`, the drivers as `agent`, each behind a
//! `ParticipantHost`, and the coordinator over all of them.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rollpoint_checkpoint::{
    Control, Coordinator, CoordinatorConfig, HostConfig, Participant, ParticipantHost,
};
use rollpoint_driver::{AgentParticipant, DriverConfig, Runs};
use rollpoint_gateway::config::UpstreamApi;
use rollpoint_gateway::{Gateway, GatewayConfig, ModelParticipant};
use rollpoint_model_script::{Script, ScriptServer};
use rollpoint_owner::{LocalOwner, Owner, ResourcesParticipant};
use rollpoint_sandbox::Backend;
use rollpoint_sandbox::local::{LocalBackend, LocalOptions};
use tokio::task::JoinHandle;

use crate::config::{ModelApi, ModelSource, RunConfig};
use crate::errors::RunError;

/// Where the owner keeps its sandboxes inside a run directory.
pub const OWNER_DIR: &str = "owner";
/// The scripted model's request log (one JSON line per request, all runs).
pub const MODEL_LOG: &str = "model-script.log";
/// The gateway's call ledger.
pub const LEDGER: &str = "gateway/ledger.sqlite";

/// Every participant of a run, in this process.
#[derive(Debug)]
pub struct Stack {
    pub backend: Arc<LocalBackend>,
    pub owner: Arc<LocalOwner>,
    pub runs: Runs,
    pub agent: Arc<AgentParticipant>,
    pub gateway: Option<Gateway>,
    /// The gateway's port (0 when there is no gateway).
    pub gateway_port: u16,
    pub coordinator: Coordinator,
    model: Option<ScriptServer>,
    serving: Option<JoinHandle<()>>,
}

/// Opens the run's sandboxes (nothing else started), for sweeping first.
pub fn open_backend(
    run_dir: &Path,
    config: &RunConfig,
    supervisor: PathBuf,
) -> Result<Arc<LocalBackend>, RunError> {
    let mut options = LocalOptions::new(supervisor);
    options.store.choice = config.store.choice();
    LocalBackend::open(&run_dir.join(OWNER_DIR), options)
        .map(Arc::new)
        .map_err(|e| RunError::setup("sandboxes", e))
}

impl Stack {
    /// Starts the model (if scripted), the gateway on `gateway_port` (0:
    /// any) and every participant over `backend`.
    pub async fn build(
        run_dir: &Path,
        config: &RunConfig,
        backend: Arc<LocalBackend>,
        gateway_port: u16,
    ) -> Result<Self, RunError> {
        let (model, upstream) = match config.model() {
            ModelSource::None => (None, None),
            ModelSource::Upstream(url) => (None, Some(url)),
            ModelSource::Script(path) => {
                let script = Script::load(&path).map_err(|e| RunError::Config {
                    path: path.clone(),
                    field: "model_script".to_owned(),
                    message: e.to_string(),
                })?;
                let server = ScriptServer::start(
                    script,
                    SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
                    Some(run_dir.join(MODEL_LOG)),
                )
                .await
                .map_err(|e| RunError::setup("scripted model", e))?;
                let url = server.base_url();
                (Some(server), Some(url))
            }
        };
        let (gateway, port, serving) = match upstream {
            None => (None, 0, None),
            Some(url) => {
                let (gateway, port, task) =
                    start_gateway(run_dir, config, &url, gateway_port).await?;
                (Some(gateway), port, Some(task))
            }
        };

        let owner = Arc::new(LocalOwner::new(Arc::clone(&backend) as Arc<dyn Backend>));
        let runs = Runs::new(
            Arc::clone(&owner) as Arc<dyn Owner>,
            DriverConfig {
                slots: config.concurrency,
                ..DriverConfig::default()
            },
        )
        .map_err(|e| RunError::setup("drivers", e))?;
        let agent = Arc::new(AgentParticipant::new(runs.clone(), "agent0"));
        let local = |p: Arc<dyn Participant>| -> Result<Arc<dyn Control>, RunError> {
            ParticipantHost::new(p, HostConfig::new(run_dir))
                .map(|c| Arc::new(c) as Arc<dyn Control>)
                .map_err(|e| RunError::setup("checkpoint control", e))
        };
        let mut controls: Vec<Arc<dyn Control>> = vec![
            local(Arc::new(ResourcesParticipant::new(
                Arc::clone(&owner),
                "owner0",
            )))?,
            local(Arc::clone(&agent) as Arc<dyn Participant>)?,
        ];
        if let Some(g) = &gateway {
            controls.push(local(Arc::new(ModelParticipant::new(
                Arc::new(g.clone()),
                "model0",
            )))?);
        }
        let mut cc = CoordinatorConfig::new(run_dir);
        cc.keep = config.keep;
        let coordinator = Coordinator::new(controls, cc)
            .await
            .map_err(|e| RunError::setup("coordinator", e))?;
        Ok(Self {
            backend,
            owner,
            runs,
            agent,
            gateway,
            gateway_port: port,
            coordinator,
            model,
            serving,
        })
    }

    /// The base harnesses put a capture key and `/v1` after:
    /// `http://127.0.0.1:<port>/r`.
    pub fn gateway_base(&self) -> Option<String> {
        self.gateway.as_ref().map(|_| {
            rollpoint_driver::runner::gateway_base(&format!(
                "http://127.0.0.1:{}",
                self.gateway_port
            ))
        })
    }

    /// Stops serving the gateway and the scripted model.
    pub async fn shutdown(mut self) {
        if let Some(task) = self.serving.take() {
            task.abort();
        }
        if let Some(model) = self.model.take() {
            model.shutdown().await;
        }
    }
}

async fn start_gateway(
    run_dir: &Path,
    config: &RunConfig,
    upstream: &str,
    port: u16,
) -> Result<(Gateway, u16, JoinHandle<()>), RunError> {
    let ledger = run_dir.join(LEDGER);
    if let Some(dir) = ledger.parent() {
        std::fs::create_dir_all(dir).map_err(|e| RunError::io(dir, e))?;
    }
    let api = match config.model_api {
        ModelApi::All => UpstreamApi::All,
        ModelApi::Openai => UpstreamApi::OpenAi,
        ModelApi::Anthropic => UpstreamApi::Anthropic,
    };
    let gateway = Gateway::new(GatewayConfig::new(upstream, api, ledger))
        .map_err(|e| RunError::setup("gateway", e))?;
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| RunError::setup("gateway", format!("bind {addr}: {e}")))?;
    let port = listener
        .local_addr()
        .map_err(|e| RunError::setup("gateway", e))?
        .port();
    let serving = gateway.clone();
    let task = tokio::spawn(async move {
        if let Err(e) = serving.serve(listener).await {
            eprintln!("rollpoint: gateway on 127.0.0.1:{port} failed: {e}");
        }
    });
    Ok((gateway, port, task))
}
