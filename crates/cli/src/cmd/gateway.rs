//! `rollpoint gateway`: runs the model gateway on its own in front of one upstream, with its
//! ledger in a SQLite file; with `--run-dir` and `--control-token-file` it also answers the
//! checkpoint control routes (`/v1/checkpoint/...`) as the model participant.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context as _;
use clap::{Args, ValueEnum};
use std::sync::Arc;

use axum::serve::ListenerExt as _;
use rollpoint_checkpoint::{Control, HostConfig, Participant, ParticipantHost};
use rollpoint_gateway::{CaptureKey, Gateway, GatewayConfig, ModelParticipant, UpstreamApi};

/// The API family of the upstream.
#[derive(Debug, Clone, Copy, ValueEnum)]
enum Api {
    /// Chat completions and Responses.
    Openai,
    /// Anthropic Messages.
    Anthropic,
    /// All three (e.g. `rollpoint model-script`).
    All,
}

/// Run the recording model gateway in front of one upstream.
#[derive(Debug, Args)]
pub struct GatewayArgs {
    /// Base URL of the upstream model server (plain http), e.g. http://127.0.0.1:8000.
    #[arg(long)]
    upstream: String,
    /// Which API the upstream speaks.
    #[arg(long, value_enum, default_value = "openai")]
    api: Api,
    /// The ledger database (created, mode 0600).
    #[arg(long)]
    db: PathBuf,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// Write the bound port to this file (atomically).
    #[arg(long)]
    port_file: Option<PathBuf>,
    /// Largest request body accepted, in bytes.
    #[arg(long, default_value_t = 32 * 1024 * 1024)]
    max_body_bytes: usize,
    /// Never answer repeated conversations from the ledger.
    #[arg(long)]
    no_replay: bool,
    /// Capture keys to accept (`<rollout>` or `<rollout>-a<N>`); repeatable.
    #[arg(long = "register")]
    keys: Vec<String>,
    /// Accept every well-formed capture key without registration.
    #[arg(long)]
    open_keys: bool,
    /// The run directory checkpoints are written under (with --control-token-file).
    #[arg(long, requires = "control_token_file")]
    run_dir: Option<PathBuf>,
    /// File holding the bearer token of the checkpoint control routes.
    #[arg(long, requires = "run_dir")]
    control_token_file: Option<PathBuf>,
}

pub fn run(args: GatewayArgs) -> anyhow::Result<()> {
    let api = match args.api {
        Api::Openai => UpstreamApi::OpenAi,
        Api::Anthropic => UpstreamApi::Anthropic,
        Api::All => UpstreamApi::All,
    };
    let mut config = GatewayConfig::new(args.upstream, api, args.db);
    config.max_body_bytes = args.max_body_bytes;
    config.replay = !args.no_replay;
    config.open_keys = args.open_keys;
    let runtime = tokio::runtime::Runtime::new().context("failed to start the async runtime")?;
    runtime.block_on(async {
        let gateway = Gateway::new(config)?;
        for key in &args.keys {
            gateway.register(&CaptureKey::parse(key)?)?;
        }
        let mut app = gateway.router();
        if let (Some(run_dir), Some(token_file)) = (&args.run_dir, &args.control_token_file) {
            let token = std::fs::read_to_string(token_file)
                .with_context(|| format!("cannot read the token file {}", token_file.display()))?;
            let token = token.trim();
            anyhow::ensure!(!token.is_empty(), "the token file {} is empty", token_file.display());
            let participant: Arc<dyn Participant> =
                Arc::new(ModelParticipant::new(Arc::new(gateway.clone()), "gateway"));
            let control: Arc<dyn Control> = Arc::new(
                ParticipantHost::new(participant, HostConfig::new(run_dir))
                    .context("cannot start the checkpoint control routes")?,
            );
            app = app.merge(rollpoint_checkpoint::router(control, token));
        }
        let listener = tokio::net::TcpListener::bind(args.listen)
            .await
            .with_context(|| format!("failed to bind the gateway on {}", args.listen))?;
        let addr = listener
            .local_addr()
            .context("failed to read the bound address")?;
        if let Some(file) = &args.port_file {
            super::model_script::write_port_file(file, addr.port())?;
        }
        eprintln!("gateway: listening on http://{addr}/r/<capture key>/v1/...");
        tokio::select! {
            r = axum::serve(listener.tap_io(|tcp| { let _ignored = tcp.set_nodelay(true); }), app) => r.context("gateway server failed")?,
            r = super::model_script::stop_signal() => r?,
        }
        gateway.flush().await?;
        Ok(())
    })
}
