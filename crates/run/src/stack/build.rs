//! Builds the embedded default: the local sandboxes and their owner as
//! `resources` and the drivers as `agent`, each behind a `ParticipantHost` in
//! this process; the gateway (with the scripted model when the config names a
//! script) as a process of its own on 127.0.0.1, the `model` participant over
//! its control routes (crate::stack::gateway); and the coordinator over all of them.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rollpoint_checkpoint::{
    Coordinator, CoordinatorConfig, HostConfig, Participant, ParticipantApi, ParticipantHost,
};
use rollpoint_driver::{AgentParticipant, DriverConfig, Runs};
use rollpoint_owner::{LocalOwner, Owner, ResourcesParticipant};
use rollpoint_sandbox::Backend;
use rollpoint_sandbox::local::{LocalBackend, LocalOptions, Tool};

use crate::config::{ModelSource, RunConfig};
use crate::errors::RunError;
use crate::stack::gateway::{GatewayProcess, Upstream};
use rollpoint_owner::travel::Travel;

/// Where the owner keeps its sandboxes inside a run directory.
pub const OWNER_DIR: &str = "owner";
/// Every participant of a run.
#[derive(Debug)]
pub struct Stack {
    pub backend: Arc<LocalBackend>,
    pub owner: Arc<LocalOwner>,
    pub runs: Runs,
    pub agent: Arc<AgentParticipant>,
    pub gateway: Option<GatewayProcess>,
    /// Parks the runs whose model calls the gateway reports stalled (`crate::stack::stalls`).
    stalls: Option<tokio::task::JoinHandle<()>>,
    /// The gateway's port (0 when there is no gateway).
    pub gateway_port: u16,
    pub coordinator: Coordinator,
    /// The checkpoint store, when the run has one.
    pub remote: Option<rollpoint_remote::RemoteStore>,
}

/// Opens the run's sandboxes (nothing else started), for sweeping first.
pub fn open_backend(
    run_dir: &Path,
    config: &RunConfig,
    supervisor: PathBuf,
) -> Result<Arc<LocalBackend>, RunError> {
    let mut options = LocalOptions::new(supervisor);
    options.store.choice = config.store.choice();
    options.image_cache.clone_from(&config.image_cache);
    options.registry = rollpoint_image::RegistryOptions {
        insecure: config.image_insecure_registries.clone(),
        ca_file: config.image_ca_file.clone(),
        auth_file: config.image_auth_file.clone(),
    };
    options.tools = sandbox_tools(&options.supervisor);
    LocalBackend::open(&run_dir.join(OWNER_DIR), options)
        .map(Arc::new)
        .map_err(|e| RunError::setup("sandboxes", e))
}

/// What a sandbox on an image gets under `/.rollpoint` (a strict one on the
/// host's root is lent them at their own paths instead): the static worker
/// beside the supervisor, the pinned harness install and the host's `node`
/// (which needs the image's glibc and libstdc++), where this host has them;
/// and this program (`ROLLPOINT_BIN`, whose `worker` subcommand a strict
/// sandbox on the host's root runs: it is lent there at its own path).
pub fn sandbox_tools(supervisor: &Path) -> Vec<Tool> {
    let mut tools = Vec::new();
    let mut add = |at: &str, host: PathBuf| {
        if host.exists() {
            tools.push(Tool {
                at: at.to_owned(),
                host,
            });
        }
    };
    let worker = std::env::var_os("ROLLPOINT_WORKER_BIN")
        .map(PathBuf::from)
        .or_else(|| supervisor.parent().map(|d| d.join("rollpoint-worker")));
    if let Some(worker) = worker {
        add("bin/rollpoint-worker", worker);
    }
    let harnesses = std::env::var(rollpoint_driver::adapter::harness::HARNESS_DIR_VAR)
        .ok()
        .filter(|d| !d.is_empty())
        .unwrap_or_else(|| rollpoint_driver::adapter::harness::DEFAULT_HARNESS_DIR.to_owned());
    add("harnesses", PathBuf::from(harnesses));
    let node = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join("node"))
        .find(|p| p.is_file());
    if let Some(node) = node {
        add("bin/node", node);
    }
    if let Ok(program) = std::env::current_exe() {
        add("bin/rollpoint", program);
    }
    tools
}

impl Stack {
    /// Starts the gateway process (`program gateway`, on `gateway_port`, 0:
    /// any) when the run has a model, and every participant over `backend`.
    pub async fn build(
        run_dir: &Path,
        config: &RunConfig,
        backend: Arc<LocalBackend>,
        program: &Path,
        gateway_port: u16,
    ) -> Result<Self, RunError> {
        let upstream = match config.model() {
            ModelSource::None => None,
            ModelSource::Upstream(url) => Some(Upstream::Url(url)),
            ModelSource::Script(path) => {
                // Checked here so a bad script is named before anything starts.
                rollpoint_model_script::Script::load(&path).map_err(|e| RunError::Config {
                    path: path.clone(),
                    field: "model_script".to_owned(),
                    message: e.to_string(),
                })?;
                Some(Upstream::Script(path))
            }
        };
        let gateway = match &upstream {
            None => None,
            Some(upstream) => {
                Some(GatewayProcess::start(run_dir, config, program, upstream, gateway_port).await?)
            }
        };
        let port = gateway.as_ref().map_or(0, GatewayProcess::port);
        if port != 0 {
            backend.route_to_gateway(std::net::SocketAddrV4::new(
                std::net::Ipv4Addr::LOCALHOST,
                port,
            ));
            // The gateway is on this node: each sandbox hands it its listener (no relay).
            backend.attach_to_gateway(Some(run_dir.join(crate::stack::gateway::ATTACH)));
        }

        let owner = Arc::new(LocalOwner::new(Arc::clone(&backend) as Arc<dyn Backend>));
        let runs = Runs::new(
            Arc::clone(&owner) as Arc<dyn Owner>,
            DriverConfig {
                slots: config.concurrency,
                route_key: gateway.as_ref().map(|g| g.route_key().clone()),
                model_health: gateway.as_ref().map(GatewayProcess::health),
                ..DriverConfig::default()
            },
        )
        .map_err(|e| RunError::setup("drivers", e))?;
        // A run that crashed while its fleet was paused resumes paused.
        if gateway.is_some()
            && crate::stack::gateway::FleetRecord::load(run_dir)?
                .paused
                .is_some()
        {
            runs.set_fleet(true);
        }
        let agent = Arc::new(AgentParticipant::new(runs.clone(), "agent0"));
        let remote = config.open_checkpoint_store()?;
        let local = |p: Arc<dyn Participant>| -> Result<Arc<dyn ParticipantApi>, RunError> {
            let host = HostConfig {
                remote: remote.clone(),
                ..HostConfig::new(run_dir)
            };
            ParticipantHost::new(p, host)
                .map(|c| Arc::new(c) as Arc<dyn ParticipantApi>)
                .map_err(|e| RunError::setup("checkpoint control", e))
        };
        let mut resources = ResourcesParticipant::new(Arc::clone(&owner), "owner0");
        if let Some(store) = &remote {
            let spool = run_dir.join("owner").join("travel");
            let travel = Travel::new(store.clone(), &spool, config.snapshot_full_every)
                .map_err(|e| RunError::setup("checkpoint store", e))?;
            resources = resources.with_travel(Arc::new(travel));
        }
        let mut controls: Vec<Arc<dyn ParticipantApi>> = vec![
            local(Arc::new(resources))?,
            local(Arc::clone(&agent) as Arc<dyn Participant>)?,
        ];
        if let Some(g) = &gateway {
            controls.push(g.control()?);
        }
        let mut cc = CoordinatorConfig::new(run_dir);
        cc.keep = config.keep;
        cc.remote = remote.clone();
        let coordinator = Coordinator::new(controls, cc)
            .await
            .map_err(|e| RunError::setup("coordinator", e))?;
        let stalls = gateway
            .as_ref()
            .map(|g| tokio::spawn(crate::stack::stalls::follow(g.client(), runs.clone())));
        Ok(Self {
            backend,
            owner,
            runs,
            agent,
            gateway,
            stalls,
            gateway_port: port,
            coordinator,
            remote,
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

    /// Stops the gateway process.
    pub async fn shutdown(mut self) {
        if let Some(stalls) = self.stalls.take() {
            stalls.abort();
        }
        if let Some(gateway) = self.gateway.take() {
            gateway.stop().await;
        }
    }
}
