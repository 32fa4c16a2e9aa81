//! `rollpoint serve gateway|owner|agent|coordinator`: one participant (or
//! the coordinator) per process, for a run spread over several machines,
//! speaking the same HTTP contract as the embedded default. `gateway` and
//! `owner` are the `rollpoint gateway` and `rollpoint owner` services under
//! this name; `agent` and `coordinator` are built from crates/serve.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::{Args, Subcommand};
use rollpoint_owner::{HttpOwner, Owner};
use rollpoint_serve::{
    AgentService, AgentSettings, CoordinatorService, CoordinatorSettings, Target,
};

use super::model_script::{stop_signal, write_port_file};

#[derive(Debug, Subcommand)]
pub enum Serve {
    /// The recording model gateway (the `model` participant).
    Gateway(Box<super::gateway::GatewayArgs>),
    /// The owner lending local sandboxes (the `resources` participant).
    Owner(super::owner::OwnerArgs),
    /// The drivers (the `agent` participant), with rollout routes.
    Agent(AgentArgs),
    /// The checkpoint coordinator over participants reached over HTTP.
    Coordinator(CoordinatorArgs),
}

/// Serve the drivers: rollouts posted over HTTP, checkpoint control routes.
#[derive(Debug, Args)]
pub struct AgentArgs {
    /// The run directory checkpoints are written under (shared by the run).
    #[arg(long)]
    run_dir: PathBuf,
    /// File holding the bearer token every request must carry.
    #[arg(long)]
    token_file: PathBuf,
    /// Base URL of the owner (`rollpoint serve owner`).
    #[arg(long)]
    owner: String,
    /// File holding the owner's token (default: --token-file).
    #[arg(long)]
    owner_token_file: Option<PathBuf>,
    /// Base URL of the gateway, given to harnesses as ROLLPOINT_GATEWAY; trajectories read
    /// their calls from its control routes.
    #[arg(long)]
    gateway: Option<String>,
    /// File holding the gateway's control token (default: --token-file).
    #[arg(long)]
    gateway_token_file: Option<PathBuf>,
    /// The run's route key, as the gateway's --route-key-file: each launch's route then
    /// carries its attempt's secret.
    #[arg(long)]
    route_key_file: Option<PathBuf>,
    /// What a token break does to a trajectory: split it into segments, or mask the rollout.
    #[arg(long, value_parser = ["split", "mask"], default_value = "split")]
    token_breaks: String,
    /// What calls answered by several policy versions do to a trajectory: keep them in one
    /// segment, split a segment where the version changes, or refuse the rollout.
    #[arg(long, value_parser = ["keep", "split", "refuse"], default_value = "keep")]
    version_breaks: String,
    /// Rollouts holding a slot at once (1..=65536).
    #[arg(long, default_value_t = 8,
          value_parser = super::number::whole::<usize>(1, rollpoint_driver::MAX_SLOTS as u64))]
    concurrency: usize,
    /// This agent's name among the run's agents.
    #[arg(long, default_value = "agent")]
    instance: String,
    #[command(flatten)]
    store: super::store_args::StoreArgs,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// Write the bound port to this file (atomically).
    #[arg(long)]
    port_file: Option<PathBuf>,
}

/// Serve the checkpoint coordinator over HTTP participants.
#[derive(Debug, Args)]
pub struct CoordinatorArgs {
    /// Where checkpoints are published (shared by the run).
    #[arg(long)]
    run_dir: PathBuf,
    /// A participant as KIND=URL (model, agent or resources); repeatable.
    #[arg(long = "participant", required = true)]
    participants: Vec<Target>,
    /// File holding the bearer token of the coordinator's routes.
    #[arg(long)]
    token_file: PathBuf,
    /// File holding the participants' token (default: --token-file).
    #[arg(long)]
    participant_token_file: Option<PathBuf>,
    /// Published checkpoints kept (1..=1000).
    #[arg(long, default_value_t = 2, value_parser = super::number::whole::<usize>(1, 1000))]
    keep: usize,
    /// Deadline of each control call, in seconds (1..=86400).
    #[arg(long, default_value_t = 300, value_parser = super::number::whole::<u64>(1, 86_400))]
    timeout_s: u64,
    /// How long to wait for every participant to answer at start, in seconds (0..=86400).
    #[arg(long, default_value_t = 60, value_parser = super::number::whole::<u64>(0, 86_400))]
    connect_timeout_s: u64,
    #[command(flatten)]
    store: super::store_args::StoreArgs,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// Write the bound port to this file (atomically).
    #[arg(long)]
    port_file: Option<PathBuf>,
}

pub fn run(serve: Serve) -> anyhow::Result<()> {
    match serve {
        Serve::Gateway(args) => super::gateway::run(*args),
        Serve::Owner(args) => super::owner::run(&args),
        Serve::Agent(args) => agent(&args),
        Serve::Coordinator(args) => coordinator(&args),
    }
}

fn create_dir(dir: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::DirBuilderExt as _;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .with_context(|| format!("cannot create {}", dir.display()))
}

async fn bind(
    listen: SocketAddr,
    port_file: Option<&Path>,
    what: &str,
) -> anyhow::Result<tokio::net::TcpListener> {
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("failed to bind the {what} on {listen}"))?;
    let addr = listener
        .local_addr()
        .context("failed to read the bound address")?;
    if let Some(file) = port_file {
        write_port_file(file, addr.port())?;
    }
    tracing::info!(service = what, address = %addr, "listening");
    Ok(listener)
}

fn agent(args: &AgentArgs) -> anyhow::Result<()> {
    let token = super::locate::token(&args.token_file)?;
    let owner_token = match &args.owner_token_file {
        Some(f) => super::locate::token(f)?,
        None => token.clone(),
    };
    let owner: Arc<dyn Owner> = Arc::new(
        HttpOwner::new(&args.owner, &owner_token)
            .with_context(|| format!("bad owner URL {}", args.owner))?,
    );
    let mut env = super::run::harness_env()?;
    if let Some(gateway) = &args.gateway {
        env.insert(
            rollpoint_driver::runner::GATEWAY_VAR.to_owned(),
            rollpoint_driver::runner::gateway_base(gateway),
        );
    }
    let gateway = match &args.gateway {
        Some(url) => {
            let t = match &args.gateway_token_file {
                Some(f) => super::locate::token(f)?,
                None => token.clone(),
            };
            Some(
                rollpoint_gateway::GatewayClient::new(url, &t)
                    .with_context(|| format!("bad gateway URL {url}"))?,
            )
        }
        None => None,
    };
    let token_breaks = rollpoint_trajectory::Breaks {
        tokens: if args.token_breaks == "mask" {
            rollpoint_trajectory::BreakPolicy::Mask
        } else {
            rollpoint_trajectory::BreakPolicy::Split
        },
        versions: match args.version_breaks.as_str() {
            "split" => rollpoint_trajectory::VersionPolicy::Split,
            "refuse" => rollpoint_trajectory::VersionPolicy::Refuse,
            _ => rollpoint_trajectory::VersionPolicy::Keep,
        },
    };
    let route_key = args
        .route_key_file
        .as_deref()
        .map(rollpoint_gateway::route_key::load)
        .transpose()?;
    let remote = args.store.open()?;
    // Created only once every argument is known good.
    create_dir(&args.run_dir)?;
    let runtime = tokio::runtime::Runtime::new().context("failed to start the async runtime")?;
    runtime.block_on(async {
        let service = AgentService::new(
            owner,
            AgentSettings {
                run_dir: args.run_dir.clone(),
                instance: args.instance.clone(),
                slots: args.concurrency,
                env,
                gateway,
                token_breaks,
                remote,
                route_key,
            },
        )?;
        let listener = bind(args.listen, args.port_file.as_deref(), "agent").await?;
        let served = tokio::select! {
            r = rollpoint_api::serve(listener, service.router(&token)) => r.context("agent server failed"),
            r = stop_signal() => r,
        };
        // Rollouts still in flight end with the service: their launches are
        // killed and their sessions closed (a checkpoint keeps them).
        if tokio::time::timeout(Duration::from_secs(120), service.shutdown())
            .await
            .is_err()
        {
            tracing::warn!("rollouts still ending after 120 s; leaving them to the owner");
        }
        served
    })
}

fn coordinator(args: &CoordinatorArgs) -> anyhow::Result<()> {
    let token = super::locate::token(&args.token_file)?;
    let participant_token = match &args.participant_token_file {
        Some(f) => super::locate::token(f)?,
        None => token.clone(),
    };
    let remote = args.store.open()?;
    create_dir(&args.run_dir)?;
    let settings = CoordinatorSettings {
        run_dir: args.run_dir.clone(),
        participants: args.participants.clone(),
        participant_token,
        keep: args.keep,
        timeout: Duration::from_secs(args.timeout_s),
        remote,
    };
    let runtime = tokio::runtime::Runtime::new().context("failed to start the async runtime")?;
    runtime.block_on(async {
        // Participants may still be starting: ask again until they answer.
        let deadline = Instant::now() + Duration::from_secs(args.connect_timeout_s);
        let service = loop {
            match CoordinatorService::connect(settings.clone()).await {
                Ok(s) => break s,
                Err(e) if Instant::now() < deadline => {
                    tracing::warn!(error = %e, "participants not reachable yet; trying again");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                Err(e) => return Err(e).context("participants did not answer"),
            }
        };
        let listener = bind(args.listen, args.port_file.as_deref(), "coordinator").await?;
        tokio::select! {
            r = rollpoint_api::serve(listener, service.router(&token)) => r.context("coordinator server failed"),
            r = stop_signal() => r,
        }
    })
}
