//! `rollpoint owner`: the owner on its own, lending local sandboxes over
//! HTTP to drivers on other machines (the same contract the embedded
//! default uses in process), and answering the checkpoint control routes
//! (`/v1/checkpoint/...`) as the resources participant, with the same
//! token. On SIGINT or SIGTERM it destroys the sandboxes it lent;
//! snapshots stay for the checkpoints that name them.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context as _;
use clap::Args;
use rollpoint_checkpoint::{HostConfig, Participant, ParticipantApi, ParticipantHost};
use rollpoint_owner::{LocalOwner, Owner, ResourcesParticipant};
use rollpoint_sandbox::local::{LocalBackend, LocalOptions};
use rollpoint_snapshot::{ImageOptions, StoreChoice, StoreOptions};

use super::locate;
use super::sweep::OWNER_DIR;

/// Serve the owner (sessions, exec, files, launch, verify, snapshot, restore) over HTTP.
#[derive(Debug, Args)]
pub struct OwnerArgs {
    /// The run directory; sandboxes and snapshots live under RUN_DIR/owner.
    #[arg(long)]
    run_dir: PathBuf,
    /// File holding the bearer token every request must carry.
    #[arg(long)]
    token_file: PathBuf,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// Write the bound port to this file (atomically).
    #[arg(long)]
    port_file: Option<PathBuf>,
    /// Snapshot store: auto (btrfs when possible), btrfs or copy.
    #[arg(long, default_value = "auto")]
    store: String,
    /// Apparent size of the btrfs image made when RUN_DIR is not on btrfs, in GiB (1..=65536).
    #[arg(long, default_value_t = 8, value_parser = super::number::whole::<u64>(1, 65_536))]
    image_gib: u64,
    /// The static supervisor binary to anchor sandboxes with.
    #[arg(long)]
    supervisor: Option<PathBuf>,
    /// The gateway's URL (`http://IPv4:PORT` or `http://NAME:PORT`): a sandbox whose
    /// network is `gateway` or `allow` reaches it through its relay at 127.0.0.1 and the
    /// same port. Without it such a sandbox reaches no gateway.
    #[arg(long)]
    gateway: Option<String>,
    /// This owner's name among the run's owners (one per node).
    #[arg(long, default_value = "owner")]
    instance: String,
    #[command(flatten)]
    checkpoint_store: super::store_args::StoreArgs,
    /// With --checkpoint-store: send each sandbox snapshot whole every this many checkpoints,
    /// incrementally between (1..=1000).
    #[arg(long, default_value_t = rollpoint_owner::travel::DEFAULT_FULL_EVERY,
          value_parser = clap::value_parser!(u32).range(1..=i64::from(rollpoint_owner::travel::MAX_FULL_EVERY)))]
    snapshot_full_every: u32,
}

pub fn run(args: &OwnerArgs) -> anyhow::Result<()> {
    let token = locate::token(&args.token_file)?;
    let remote = args.checkpoint_store.open()?;
    let choice: StoreChoice = args.store.parse()?;
    let mut options = LocalOptions::new(locate::supervisor(args.supervisor.as_ref())?);
    // The same tools and lent paths as `rollpoint run` gives its sandboxes.
    options.tools = rollpoint_run::stack::sandbox_tools(&options.supervisor);
    options.store = StoreOptions {
        choice,
        image: ImageOptions {
            size_bytes: args.image_gib << 30,
        },
    };
    let owner_dir = args.run_dir.join(OWNER_DIR);
    let backend = Arc::new(
        LocalBackend::open(&owner_dir, options)
            .with_context(|| format!("cannot open the sandboxes in {}", owner_dir.display()))?,
    );
    if let Some(url) = &args.gateway {
        backend.route_to_gateway(gateway_address(url)?);
    }
    let swept = backend.sweep_orphans()?;
    if !swept.is_empty() {
        tracing::info!(
            sandboxes = swept.len(),
            "destroyed the sandboxes a crashed owner left"
        );
    }
    let local = Arc::new(LocalOwner::new(backend.clone()));
    let mut resources = ResourcesParticipant::new(Arc::clone(&local), &args.instance);
    if let Some(store) = &remote {
        let spool = owner_dir.join("travel");
        let travel =
            rollpoint_owner::travel::Travel::new(store.clone(), &spool, args.snapshot_full_every)?;
        resources = resources.with_travel(Arc::new(travel));
    }
    let participant: Arc<dyn Participant> = Arc::new(resources);
    let control: Arc<dyn ParticipantApi> = Arc::new(
        ParticipantHost::new(
            participant,
            HostConfig {
                remote,
                ..HostConfig::new(&args.run_dir)
            },
        )
        .context("cannot start the checkpoint control routes")?,
    );
    let owner: Arc<dyn Owner> = local;
    let app =
        rollpoint_owner::router(owner, &token).merge(rollpoint_checkpoint::router(control, &token));
    let runtime = tokio::runtime::Runtime::new().context("failed to start the async runtime")?;
    let served = runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(args.listen)
            .await
            .with_context(|| format!("failed to bind the owner on {}", args.listen))?;
        let addr = listener
            .local_addr()
            .context("failed to read the bound address")?;
        if let Some(file) = &args.port_file {
            super::model_script::write_port_file(file, addr.port())?;
        }
        tracing::info!(address = %addr, "owner listening: /v1/owner/ and /v1/checkpoint/");
        tokio::select! {
            r = rollpoint_api::serve(listener, app) => r.context("owner server failed"),
            r = super::model_script::stop_signal() => r,
        }
    });
    drop(runtime);
    let destroyed = backend.destroy_all();
    served?;
    destroyed.context("failed to destroy the sandboxes on shutdown")
}

/// The IPv4 address and port of a gateway URL, resolved on this host.
fn gateway_address(url: &str) -> anyhow::Result<std::net::SocketAddrV4> {
    use std::net::ToSocketAddrs as _;
    let bad = || anyhow::anyhow!("--gateway {url:?}: expected http://HOST:PORT");
    let rest = url.strip_prefix("http://").ok_or_else(bad)?;
    let authority = rest.split('/').next().unwrap_or_default();
    let (host, port) = authority.rsplit_once(':').ok_or_else(bad)?;
    let port: u16 = port.parse().map_err(|_| bad())?;
    (host, port)
        .to_socket_addrs()
        .with_context(|| format!("--gateway {url:?}: cannot resolve {host}"))?
        .find_map(|a| match a {
            SocketAddr::V4(v4) => Some(v4),
            SocketAddr::V6(_) => None,
        })
        .ok_or_else(|| anyhow::anyhow!("--gateway {url:?}: {host} has no IPv4 address"))
}
