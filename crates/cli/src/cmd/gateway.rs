//! `rollpoint gateway`: runs the model gateway on its own in front of one upstream (or of a
//! scripted model it serves itself), with its ledger in a SQLite file; with `--run-dir` and
//! `--control-token-file` it also answers the checkpoint control routes
//! (`/v1/checkpoint/...`) as the model participant and its own (`/v1/gateway/...`).
//!
//! `rollpoint run` starts one such process per run so the gateway and its ledger outlive a
//! crash of the runner: with `--owner PID` it watches that process (its parent) and, once it
//! is gone, takes no new call, records every call already sent upstream, and exits. The port
//! is taken before the ledger is opened, so two gateways of a run never share it.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::{Args, ValueEnum};
use std::sync::Arc;

use rollpoint_checkpoint::{HostConfig, Participant, ParticipantApi, ParticipantHost};
use rollpoint_gateway::{Gateway, GatewayConfig, ModelParticipant, UpstreamApi};
use rollpoint_model_script::{Script, ScriptServer};
use rollpoint_proto::key::AttemptKey;

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

/// Longest `--bind-wait-s` and `--drain-s`: an hour.
const MAX_WAIT_S: u64 = 3600;

/// How often the owner is looked at.
const OWNER_POLL: Duration = Duration::from_millis(100);

/// Run the recording model gateway in front of one upstream.
#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("source").required(true).args(["upstream", "model_script"])))]
pub struct GatewayArgs {
    /// Base URL of the upstream model server (http:// or https://), e.g. http://127.0.0.1:8000;
    /// repeated, replicas of one model (calls go to the least loaded, sticky per rollout).
    #[arg(long)]
    upstream: Vec<String>,
    /// Send each call to the replica with the fewest calls outstanding, not the one its
    /// rollout used last (for servers without a prefix cache).
    #[arg(long)]
    no_sticky: bool,
    /// Seconds a call retries an upstream outage (429, 503, refused, reset, no replica)
    /// before its attempt is reported stalled (0..=86400).
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(0..=rollpoint_gateway::config::MAX_OUTAGE_S))]
    retry_s: u64,
    /// Seconds after which a call still without a reply ends `upstream_unreachable`, as do
    /// its attempt's later calls (1..=86400).
    #[arg(long, default_value_t = 600, value_parser = clap::value_parser!(u64).range(1..=rollpoint_gateway::config::MAX_OUTAGE_S))]
    outage_s: u64,
    /// The policy version calls are tagged with until a fleet continue names another (the
    /// id alphabet, at most 128 bytes).
    #[arg(long)]
    policy_version: Option<String>,
    /// Start with the fleet paused (a run resumed after a crash during a weight update):
    /// nothing goes upstream until a fleet continue; calls generating at the pause did
    /// `finish` or `abort`.
    #[arg(long, value_parser = ["finish", "abort"])]
    paused: Option<String>,
    /// Serve this model script in this process and use it as the upstream.
    #[arg(long)]
    model_script: Option<PathBuf>,
    /// With --model-script: append one JSON line per request it answers to this file.
    #[arg(long, requires = "model_script")]
    model_log: Option<PathBuf>,
    /// PEM certificates to trust for an https:// upstream besides the system's roots.
    #[arg(long)]
    ca_file: Option<PathBuf>,
    /// Environment variable holding the upstream's API key (sent instead of any key a
    /// caller sends).
    #[arg(long, conflicts_with = "credential_file")]
    credential_env: Option<String>,
    /// File (mode 0600) holding the upstream's API key.
    #[arg(long)]
    credential_file: Option<PathBuf>,
    /// Calls upstream at once; more wait their turn (0: no limit; 0..=65536).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=65_536))]
    max_upstream_calls: u64,
    /// A models file (`{"v": 1, "models": [{name, upstream, api, ca_file?, credential_env?,
    /// credential_file?, max_calls?}]}`): calls naming one of these models go to its upstream,
    /// the rest to --upstream.
    #[arg(long)]
    models: Option<PathBuf>,
    /// Which API the upstream speaks.
    #[arg(long, value_enum, default_value = "openai")]
    api: Api,
    /// Capture each call's token ids and logprobs from a token-returning upstream (`vllm`);
    /// with --model-script the scripted model answers in token mode. `tito`: render and
    /// tokenize chat calls here (--tokenizer, --chat-template) and send the upstream's
    /// /v1/completions token ids.
    #[arg(long, value_parser = ["vllm", "tito"])]
    model_tokens: Option<String>,
    /// With --model-tokens tito: the model's tokenizer.json.
    #[arg(long)]
    tokenizer: Option<PathBuf>,
    /// With --model-tokens tito: the model's chat template (a Jinja file, or a
    /// tokenizer_config.json holding `chat_template`).
    #[arg(long)]
    chat_template: Option<PathBuf>,
    /// With --model-tokens tito: how the model writes tool calls (`hermes`).
    #[arg(long, default_value = "hermes", value_parser = ["hermes"])]
    tool_parser: String,
    /// With --model-tokens: do not ask for logprobs, only the ids (smaller replies).
    #[arg(long, requires = "model_tokens")]
    no_model_logprobs: bool,
    /// The ledger database (created, mode 0600).
    #[arg(long)]
    db: PathBuf,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// While the address is taken, retry binding it for up to this many seconds (0..=3600).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=MAX_WAIT_S))]
    bind_wait_s: u64,
    /// Write the bound port to this file (atomically).
    #[arg(long)]
    port_file: Option<PathBuf>,
    /// A Unix socket (made here, mode 0600) on which the anchors of sandboxes on this node hand
    /// over the listener each makes at 127.0.0.1:<port> in its sandbox's network namespace; the
    /// gateway serves the model routes on it, so a sandbox's calls take no relay.
    #[arg(long)]
    attach_socket: Option<PathBuf>,
    /// Largest request body accepted, in bytes (1024..=1073741824).
    #[arg(long, default_value_t = 32 * 1024 * 1024,
          value_parser = super::number::whole::<usize>(1024, 1 << 30))]
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
    /// The run's route key (`{"v":1,"key":HEX}`, mode 0600): every model route must then
    /// carry its attempt's secret, `/r/<key>@<secret>/`; others are refused 403.
    #[arg(long)]
    route_key_file: Option<PathBuf>,
    /// The run directory checkpoints are written under (with --control-token-file).
    #[arg(long, requires = "control_token_file")]
    run_dir: Option<PathBuf>,
    #[command(flatten)]
    checkpoint_store: super::store_args::StoreArgs,
    /// File holding the bearer token of the control routes.
    #[arg(long, requires = "run_dir")]
    control_token_file: Option<PathBuf>,
    /// The process this gateway serves (its parent): when it is gone, take no new call,
    /// record the calls in flight and exit. SIGTERM and SIGINT are then ignored (a scheduler
    /// or a terminal signals the whole job, and the owner's stop checkpoint still needs the
    /// gateway); the owner stops it with SIGUSR2.
    #[arg(long, value_parser = super::number::whole::<u32>(1, i32::MAX as u64))]
    owner: Option<u32>,
    /// After the owner is gone, wait at most this many seconds (0..=3600) for calls in
    /// flight to be recorded.
    #[arg(long, default_value_t = 600, value_parser = clap::value_parser!(u64).range(0..=MAX_WAIT_S))]
    drain_s: u64,
}

/// Resolves when the gateway is asked to stop: SIGTERM or SIGINT, or with an owner SIGUSR2
/// alone (SIGTERM and SIGINT are logged and ignored: they were sent to the whole job, and the
/// owner stops the gateway after its stop checkpoint).
async fn stop_signal(owner: Option<u32>) -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let Some(owner) = owner else {
        return super::model_script::stop_signal().await;
    };
    let mut usr2 = signal(SignalKind::user_defined2()).context("failed to watch SIGUSR2")?;
    let mut term = signal(SignalKind::terminate()).context("failed to watch SIGTERM")?;
    let mut int = signal(SignalKind::interrupt()).context("failed to watch SIGINT")?;
    loop {
        let name = tokio::select! {
            _ = usr2.recv() => return Ok(()),
            _ = term.recv() => "SIGTERM",
            _ = int.recv() => "SIGINT",
        };
        tracing::info!(
            signal = name,
            owner,
            "ignored: the gateway stops when its owner stops it or is gone"
        );
    }
}

/// Binds `addr`, retrying while it is in use for up to `wait`.
async fn bind(addr: SocketAddr, wait: Duration) -> anyhow::Result<tokio::net::TcpListener> {
    let until = Instant::now() + wait;
    let mut said = false;
    loop {
        match tokio::net::TcpListener::bind(addr).await {
            Ok(listener) => return Ok(listener),
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse && Instant::now() < until => {
                if !said {
                    tracing::info!(
                        address = %addr,
                        wait_s = wait.as_secs(),
                        "the address is in use (a previous gateway of the run may still be recording its calls); waiting"
                    );
                    said = true;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => {
                return Err(e).with_context(|| format!("failed to bind the gateway on {addr}"));
            }
        }
    }
}

/// Resolves when `owner` is no longer this process's parent (it died; the orphan was
/// re-parented). Checked before anything starts, so a gateway whose owner is already gone
/// never serves.
async fn owner_gone(owner: u32) {
    while std::os::unix::process::parent_id() == owner {
        tokio::time::sleep(OWNER_POLL).await;
    }
}

/// The upstreams a models file names, each checked and its credential read.
fn read_models(
    path: &std::path::Path,
) -> anyhow::Result<Vec<rollpoint_gateway::config::ModelUpstream>> {
    use rollpoint_gateway::config::{MODELS_VERSION, ModelsFile};
    let bytes = std::fs::read(path)
        .with_context(|| format!("cannot read the models file {}", path.display()))?;
    let file: ModelsFile = rollpoint_proto::decode("models file", MODELS_VERSION, &bytes)
        .with_context(|| format!("models file {}", path.display()))?;
    file.models
        .iter()
        .enumerate()
        .map(|(i, m)| {
            m.check().map_err(|(field, message)| {
                anyhow::anyhow!(
                    "models file {}: models[{i}].{field}: {message}",
                    path.display()
                )
            })?;
            m.resolve()
                .with_context(|| format!("models file {}: models[{i}]", path.display()))
        })
        .collect()
}

/// What the arguments name, checked and read before the port or the ledger is touched.
struct Checked {
    api: UpstreamApi,
    keys: Vec<AttemptKey>,
    route_key: Option<rollpoint_proto::route::RouteKey>,
    token: Option<String>,
    credential: Option<rollpoint_gateway::credential::Credential>,
    models: Vec<rollpoint_gateway::config::ModelUpstream>,
    tito: Option<rollpoint_gateway::tito::TitoConfig>,
    script: Option<Script>,
}

pub fn run(args: GatewayArgs) -> anyhow::Result<()> {
    if let Some(owner) = args.owner {
        let parent = std::os::unix::process::parent_id();
        anyhow::ensure!(
            parent == owner,
            "--owner {owner}: the gateway's parent is {parent}; the owner is gone or is not the parent"
        );
    }
    let checked = check(&args)?;
    let runtime = tokio::runtime::Runtime::new().context("failed to start the async runtime")?;
    runtime.block_on(serve(&args, checked))
}

/// Everything the arguments name, checked before the port or the ledger is touched.
fn check(args: &GatewayArgs) -> anyhow::Result<Checked> {
    let api = match args.api {
        Api::Openai => UpstreamApi::OpenAi,
        Api::Anthropic => UpstreamApi::Anthropic,
        Api::All => UpstreamApi::All,
    };
    let keys = args
        .keys
        .iter()
        .map(|k| AttemptKey::parse(k))
        .collect::<Result<Vec<_>, _>>()?;
    let route_key = args
        .route_key_file
        .as_deref()
        .map(rollpoint_gateway::route_key::load)
        .transpose()?;
    let token = match &args.control_token_file {
        Some(file) => Some(super::locate::token(file)?),
        None => None,
    };
    rollpoint_gateway::config::check_upstream(
        "",
        (!args.upstream.is_empty()).then_some(args.upstream.as_slice()),
        args.credential_env.as_deref(),
        args.credential_file.is_some(),
        usize::try_from(args.max_upstream_calls)?,
    )
    .map_err(|(field, message)| anyhow::anyhow!("--{}: {message}", field.replace('_', "-")))?;
    if let Some(v) = &args.policy_version
        && let Some(problem) = rollpoint_proto::limits::name_problem(v)
    {
        anyhow::bail!("--policy-version {v:?} {problem}");
    }
    let credential = rollpoint_gateway::credential::Credential::named(
        args.credential_env.as_deref(),
        args.credential_file.as_deref(),
    )?;
    let models = match &args.models {
        Some(path) => read_models(path)?,
        None => Vec::new(),
    };
    Ok(Checked {
        api,
        keys,
        route_key,
        token,
        credential,
        models,
        tito: tito_config(args)?,
        script: load_script(args)?,
    })
}

/// The token-in/token-out settings, with `--model-tokens tito` only.
fn tito_config(args: &GatewayArgs) -> anyhow::Result<Option<rollpoint_gateway::tito::TitoConfig>> {
    match (
        args.model_tokens.as_deref(),
        &args.tokenizer,
        &args.chat_template,
    ) {
        (Some("tito"), Some(tokenizer), Some(template)) => {
            Ok(Some(rollpoint_gateway::tito::TitoConfig {
                tokenizer: tokenizer.clone(),
                template: template.clone(),
                tool_parser: args.tool_parser.parse().map_err(anyhow::Error::msg)?,
            }))
        }
        (Some("tito"), _, _) => {
            anyhow::bail!("--model-tokens tito needs --tokenizer and --chat-template")
        }
        (_, None, None) => Ok(None),
        _ => anyhow::bail!("--tokenizer and --chat-template go with --model-tokens tito"),
    }
}

/// The model script to serve, if one is named.
fn load_script(args: &GatewayArgs) -> anyhow::Result<Option<Script>> {
    let Some(path) = &args.model_script else {
        return Ok(None);
    };
    let mut script = Script::load(path)?;
    // The scripted model stands in for the token-returning upstream.
    if args.model_tokens.as_deref() == Some("vllm") {
        script.tokens.get_or_insert_default();
    }
    Ok(Some(script))
}

/// Binds the port, starts the gateway and serves until it is stopped or its owner is gone.
async fn serve(args: &GatewayArgs, mut checked: Checked) -> anyhow::Result<()> {
    // The port first: it keeps a second gateway of the run off the ledger.
    let listener = bind(args.listen, Duration::from_secs(args.bind_wait_s)).await?;
    let addr = listener
        .local_addr()
        .context("failed to read the bound address")?;
    let (model, upstream) =
        start_upstream(args, checked.script.take(), checked.tito.as_ref()).await?;
    let config = gateway_config(args, upstream, &mut checked)?;
    let gateway = Gateway::new(config)?;
    for key in &checked.keys {
        gateway.register(key)?;
    }
    let mut app = gateway.router();
    if let (Some(run_dir), Some(token)) = (&args.run_dir, checked.token.as_deref()) {
        app = app.merge(control_routes(args, &gateway, run_dir, token)?);
    }
    if let Some(path) = &args.attach_socket {
        if let Err(e) = rollpoint_proctree::limits::raise_open_files() {
            tracing::warn!(error = %e, "cannot raise the open-descriptor limit; attached sandboxes past it will not start");
        }
        let socket = rollpoint_gateway::attach::AttachSocket::bind(path)?;
        tokio::spawn(socket.serve(gateway.model_router()));
    }
    if let Some(file) = &args.port_file {
        super::model_script::write_port_file(file, addr.port())?;
    }
    tracing::info!(address = %addr, "gateway listening for model calls at /r/<capture key>/v1/");
    // A task of its own: it goes on serving replies in flight while the gateway drains.
    let mut serving = tokio::spawn(rollpoint_api::serve(listener, app));
    let owner = async {
        match args.owner {
            Some(pid) => owner_gone(pid).await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        r = &mut serving => r.context("gateway server task failed")?.context("gateway server failed")?,
        r = stop_signal(args.owner) => r?,
        () = owner => drain(&gateway, args.owner.unwrap_or_default(), args.drain_s).await,
    }
    serving.abort();
    gateway.flush().await?;
    if let Some(model) = model {
        model.shutdown().await;
    }
    Ok(())
}

/// The upstream's URL: the model script's, served here, or the first `--upstream`.
async fn start_upstream(
    args: &GatewayArgs,
    script: Option<Script>,
    tito: Option<&rollpoint_gateway::tito::TitoConfig>,
) -> anyhow::Result<(Option<ScriptServer>, String)> {
    match (script, args.upstream.first()) {
        (Some(script), _) => {
            let local = SocketAddr::from((std::net::Ipv4Addr::LOCALHOST, 0));
            let server = ScriptServer::start(script, local, args.model_log.clone()).await?;
            let url = server.base_url();
            // The scripted model stands in for the token-in/token-out upstream.
            if let Some(t) = tito {
                server.serve_completions(&t.tokenizer)?;
            }
            Ok((Some(server), url))
        }
        (None, Some(url)) => Ok((None, url.clone())),
        (None, None) => anyhow::bail!("give --upstream or --model-script"),
    }
}

/// The gateway's configuration from the arguments.
fn gateway_config(
    args: &GatewayArgs,
    upstream: String,
    checked: &mut Checked,
) -> anyhow::Result<GatewayConfig> {
    let mut config = GatewayConfig::new(upstream, checked.api, args.db.clone());
    config.replicas = args.upstream.iter().skip(1).cloned().collect();
    config.sticky = !args.no_sticky;
    config.policy_version.clone_from(&args.policy_version);
    config.fleet_paused = args.paused.as_deref().map(|p| {
        if p == "abort" {
            rollpoint_api::wire::InFlightCalls::Abort
        } else {
            rollpoint_api::wire::InFlightCalls::Finish
        }
    });
    config.outage = rollpoint_gateway::config::OutagePolicy {
        retry: Duration::from_secs(args.retry_s),
        outage: Duration::from_secs(args.outage_s),
    };
    config.max_body_bytes = args.max_body_bytes;
    config.replay = !args.no_replay;
    config.open_keys = args.open_keys;
    config.route_key = checked.route_key.take();
    config.ca_file = args.ca_file.clone();
    config.credential = checked.credential.take();
    config.max_upstream_calls = usize::try_from(args.max_upstream_calls)?;
    config.models = std::mem::take(&mut checked.models);
    config.tokens = args
        .model_tokens
        .as_deref()
        .map(str::parse::<rollpoint_gateway::TokenSource>)
        .transpose()
        .map_err(anyhow::Error::msg)?
        .filter(|s| *s == rollpoint_gateway::TokenSource::Vllm);
    config.tito.clone_from(&checked.tito);
    config.token_logprobs = !args.no_model_logprobs;
    Ok(config)
}

/// The checkpoint control routes (the gateway as the model participant) and the gateway's own.
fn control_routes(
    args: &GatewayArgs,
    gateway: &Gateway,
    run_dir: &std::path::Path,
    token: &str,
) -> anyhow::Result<axum::Router> {
    let participant: Arc<dyn Participant> =
        Arc::new(ModelParticipant::new(Arc::new(gateway.clone()), "gateway"));
    let control: Arc<dyn ParticipantApi> = Arc::new(
        ParticipantHost::new(
            participant,
            HostConfig {
                remote: args.checkpoint_store.open()?,
                ..HostConfig::new(run_dir)
            },
        )
        .context("cannot start the checkpoint control routes")?,
    );
    Ok(rollpoint_checkpoint::router(control, token)
        .merge(rollpoint_gateway::admin::router(gateway.clone(), token)))
}

/// The owner is gone: waits up to `drain_s` for the calls sent upstream to be recorded.
async fn drain(gateway: &Gateway, owner: u32, drain_s: u64) {
    tracing::warn!(
        owner,
        recording = gateway.recording(),
        "the gateway's owner is gone: taking no new call, recording the calls sent upstream"
    );
    let limit = Duration::from_secs(drain_s);
    let drained = tokio::time::timeout(limit, gateway.drain()).await;
    if drained.is_ok() {
        tracing::info!("every call sent upstream is recorded; the gateway exits");
    } else {
        tracing::error!(
            unrecorded = gateway.recording(),
            waited_s = limit.as_secs(),
            "calls still unrecorded after the drain limit; the gateway exits"
        );
    }
}
