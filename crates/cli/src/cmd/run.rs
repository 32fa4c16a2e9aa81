//! `rollpoint run TASKS.jsonl --run-dir DIR`: the embedded default. Every
//! participant runs in this process; tasks are dispatched, each finished
//! rollout is a row of `RUN_DIR/results.jsonl`, every in-flight rollout is
//! checkpointed on a timer and on SIGUSR1, and SIGTERM/SIGINT stop the run
//! after a checkpoint (exit code 75; `rollpoint resume` continues it).
//! With `--listen`, checkpoints and status are also served over HTTP.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context as _;
use rollpoint_run::{
    EXIT_STOPPED, Ending, Inputs, Listen, MAX_CHECKPOINT_EVERY_S, MAX_CONCURRENCY, MAX_KEEP,
    RunConfig, Signal, StoreKind, load_tasks,
};
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::mpsc;

use super::{locate, number};

#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// The tasks: a file of one rollout task (JSON) per line, or a Harbor
    /// dataset (a directory of task directories, or one task directory),
    /// given as `harbor:DIR` or as the directory itself.
    pub tasks: PathBuf,
    #[command(flatten)]
    pub harbor: HarborArgs,
    /// Where the run keeps its state, results and checkpoints.
    #[arg(long)]
    pub run_dir: PathBuf,
    /// A run configuration (TOML or JSON); the flags below override it.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Rollouts running at once (1..=65536).
    #[arg(long, value_parser = number::whole::<usize>(1, MAX_CONCURRENCY as u64))]
    pub concurrency: Option<usize>,
    /// Seconds between checkpoints (0: only on signals; 0..=604800).
    #[arg(long, value_parser = number::whole::<u64>(0, MAX_CHECKPOINT_EVERY_S))]
    pub checkpoint_every_s: Option<u64>,
    /// Published checkpoints kept (1..=1000).
    #[arg(long, value_parser = number::whole::<usize>(1, MAX_KEEP as u64))]
    pub keep: Option<usize>,
    /// Base URL of the model upstream (plain http).
    #[arg(long, conflicts_with = "model_script")]
    pub model_upstream: Option<String>,
    /// A model script to serve in process instead of an upstream.
    #[arg(long)]
    pub model_script: Option<PathBuf>,
    /// Snapshot store: auto, btrfs or copy.
    #[arg(long, value_parser = parse_store)]
    pub store: Option<StoreKind>,
    /// The static supervisor binary.
    #[arg(long)]
    pub supervisor: Option<PathBuf>,
    /// The gateway's port on 127.0.0.1 (0: any; 0..=65535).
    #[arg(long, value_parser = number::whole::<u16>(0, 65_535))]
    pub gateway_port: Option<u16>,
    /// Rollouts of each task, one group per task (1..=1024).
    #[arg(long, value_parser = number::whole::<u32>(1, u64::from(rollpoint_run::config::MAX_SAMPLES)))]
    pub samples: Option<u32>,
    /// Times a rollout the infrastructure ended starts again in a fresh
    /// sandbox (0..=100).
    #[arg(long, value_parser = number::whole::<u32>(0, u64::from(rollpoint_run::config::MAX_RETRY_INFRA)))]
    pub retry_infra: Option<u32>,
    /// If the run directory or the config's `checkpoint_store` already holds
    /// this run, resume it instead of starting it (a requeued or rescheduled job
    /// runs the same command again).
    #[arg(long)]
    pub or_resume: bool,
    #[command(flatten)]
    pub stop: StopArgs,
    #[command(flatten)]
    pub control: EndpointArgs,
}

/// How SIGTERM stops the run.
#[derive(Debug, clap::Args)]
pub struct StopArgs {
    /// Seconds the process may still run after SIGTERM (the scheduler's grace
    /// period; 1..=86400): the stop checkpoint is taken only if the last
    /// checkpoint's time says it fits, and abandoned unpublished if it does
    /// not finish in time. Unset: the stop checkpoint takes what it takes.
    #[arg(long, value_parser = number::whole::<u64>(1, 86_400))]
    pub grace_s: Option<u64>,
}

/// How a Harbor dataset is run.
#[derive(Debug, clap::Args)]
pub struct HarborArgs {
    /// Who does a Harbor task: `opencode`, `codex`, `claude-code`, `pi`,
    /// `native`, `oracle` (its solution/solve.sh) or any shell command
    /// (the instruction in `$ROLLPOINT_INSTRUCTION`).
    #[arg(long)]
    pub agent: Option<String>,
    /// The model name the agent asks the gateway for.
    #[arg(long, default_value = "rollpoint-scripted")]
    pub model: String,
    /// Run the tasks rollpoint can run and list the others, rather than
    /// refusing the dataset.
    #[arg(long)]
    pub skip_refused: bool,
}

/// The Harbor dataset `tasks` names, if it names one.
fn harbor_source(tasks: &std::path::Path) -> Option<PathBuf> {
    let text = tasks.to_str().unwrap_or_default();
    if let Some(dir) = text.strip_prefix("harbor:") {
        return Some(PathBuf::from(dir));
    }
    tasks.is_dir().then(|| tasks.to_owned())
}

/// Tasks whose environment did not build, by rollout id.
type HarborFailed = std::collections::BTreeMap<String, (rollpoint_driver::InfraClass, String)>;

/// Maps the Harbor dataset at `source` to `RUN_DIR/tasks.jsonl` (building
/// its environments) and returns that file, with the tasks whose
/// environment did not build.
fn prepare_harbor(
    source: &std::path::Path,
    args: &RunArgs,
    config: &RunConfig,
) -> anyhow::Result<(PathBuf, HarborFailed)> {
    let Some(agent) = &args.harbor.agent else {
        anyhow::bail!(
            "{}: a Harbor dataset needs --agent (opencode, codex, claude-code, pi, native, oracle \
             or a command)",
            source.display()
        );
    };
    if rollpoint_run::RunState::path(&args.run_dir).exists() {
        anyhow::bail!(
            "{}: a run already lives here: continue it with `rollpoint resume`",
            args.run_dir.display()
        );
    }
    std::fs::create_dir_all(&args.run_dir)
        .with_context(|| format!("cannot create {}", args.run_dir.display()))?;
    let builder = rollpoint_harbor::Builder {
        cache: config
            .image_cache
            .clone()
            .unwrap_or_else(|| args.run_dir.join("owner").join("images")),
        insecure: config.image_insecure_registries.clone(),
        auth_file: config.image_auth_file.clone(),
    };
    let disk_limit = config.store != StoreKind::Copy;
    if !disk_limit {
        eprintln!(
            "rollpoint: store = \"copy\": the tasks' environment.storage_mb is not enforced \
             (only the btrfs store limits a sandbox's disk)"
        );
    }
    let settings = rollpoint_harbor::Settings {
        agent: rollpoint_harbor::Agent::parse(agent),
        model: args.harbor.model.clone(),
        disk_limit,
    };
    let prepared =
        rollpoint_harbor::prepare(source, &settings, &builder, args.harbor.skip_refused)?;
    for (task, reason) in &prepared.refused {
        eprintln!("rollpoint: task {task} refused: {reason}");
    }
    for (task, keys) in &prepared.unknown {
        eprintln!(
            "rollpoint: task {task}: task.toml keys not in the schema, not used: {}",
            keys.join(", ")
        );
    }
    tracing::info!(
        tasks = prepared.tasks.len(),
        refused = prepared.refused.len(),
        built = prepared.built,
        reused = prepared.reused,
        "Harbor dataset read"
    );
    for (task, _, error) in &prepared.failed {
        eprintln!("rollpoint: task {task}: {error}; its rollouts end as infra_error");
    }
    let path = args.run_dir.join("tasks.jsonl");
    rollpoint_harbor::write_tasks(&path, &prepared.tasks)?;
    let failed = prepared
        .failed
        .into_iter()
        .map(|(task, class, error)| (task, (class, error)))
        .collect();
    Ok((path, failed))
}

/// The run's control endpoint (checkpoint and status over HTTP).
#[derive(Debug, clap::Args)]
pub struct EndpointArgs {
    /// Serve the control endpoint here (`127.0.0.1:0` picks a port; the
    /// address is written to RUN_DIR/control.json).
    #[arg(long, requires = "control_token_file")]
    pub listen: Option<SocketAddr>,
    /// The bearer token the control endpoint admits.
    #[arg(long, requires = "listen")]
    pub control_token_file: Option<PathBuf>,
}

fn parse_store(s: &str) -> Result<StoreKind, String> {
    match s {
        "auto" => Ok(StoreKind::Auto),
        "btrfs" => Ok(StoreKind::Btrfs),
        "copy" => Ok(StoreKind::Copy),
        other => Err(format!("unknown store {other:?} (auto, btrfs or copy)")),
    }
}

/// The loop's inputs: SIGUSR1 asks for a checkpoint, SIGTERM and SIGINT
/// for a stop, and the control endpoint, when asked for, serves requests.
pub fn inputs(control: &EndpointArgs, stop: &StopArgs) -> anyhow::Result<Inputs> {
    let (tx, rx) = mpsc::unbounded_channel();
    let listen = match (&control.listen, &control.control_token_file) {
        (Some(addr), Some(file)) => Some(Listen {
            addr: *addr,
            token: locate::token(file)?,
            loop_tx: tx.clone(),
        }),
        _ => None,
    };
    let mut usr1 = signal(SignalKind::user_defined1()).context("cannot handle SIGUSR1")?;
    let mut term = signal(SignalKind::terminate()).context("cannot handle SIGTERM")?;
    let mut int = signal(SignalKind::interrupt()).context("cannot handle SIGINT")?;
    let loop_tx = tx.clone();
    let (stop_tx, stop_requested) = tokio::sync::watch::channel(None);
    tokio::spawn(async move {
        loop {
            let sig = tokio::select! {
                Some(()) = usr1.recv() => Signal::Checkpoint,
                Some(()) = term.recv() => Signal::Stop(std::time::Instant::now()),
                Some(()) = int.recv() => Signal::Stop(std::time::Instant::now()),
                else => return,
            };
            if let Signal::Stop(at) = sig {
                stop_tx.send_if_modified(|asked| asked.is_none() && asked.replace(at).is_none());
            }
            if tx.send(sig).is_err() {
                return;
            }
        }
    });
    Ok(Inputs {
        signals: rx,
        listen,
        program: std::env::current_exe().context("cannot locate the rollpoint binary")?,
        forks: Vec::new(),
        loop_tx,
        grace: stop.grace_s.map(std::time::Duration::from_secs),
        stop_requested,
    })
}

/// What every harness gets in its environment: `ROLLPOINT_BIN`, this
/// binary (its `worker` subcommand is the native worker).
pub fn harness_env() -> anyhow::Result<std::collections::BTreeMap<String, String>> {
    let exe = std::env::current_exe().context("cannot locate the rollpoint binary")?;
    Ok(std::collections::BTreeMap::from([(
        "ROLLPOINT_BIN".to_owned(),
        exe.display().to_string(),
    )]))
}

/// Reports how the loop ended; a stop exits with 75.
pub fn finish(ending: Ending) -> anyhow::Result<()> {
    match ending {
        Ending::Finished { rows } => {
            tracing::info!(rows, "the run finished");
            Ok(())
        }
        Ending::StoppedWithout { latest, why } => {
            tracing::warn!(
                latest = latest.as_deref().unwrap_or("none"),
                why = %why,
                "stopped without a stop checkpoint; `rollpoint resume` continues from the latest"
            );
            std::process::exit(EXIT_STOPPED)
        }
        Ending::Stopped { checkpoint } => {
            tracing::info!(
                checkpoint = %checkpoint,
                "stopped after a checkpoint; continue with `rollpoint resume`"
            );
            std::process::exit(EXIT_STOPPED)
        }
    }
}

pub fn run(args: RunArgs) -> anyhow::Result<()> {
    let mut config = match &args.config {
        Some(path) => RunConfig::load(path)?,
        None => RunConfig::default(),
    };
    if let Some(v) = args.concurrency {
        config.concurrency = v;
    }
    if let Some(v) = args.checkpoint_every_s {
        config.checkpoint_every_s = v;
    }
    if let Some(v) = args.keep {
        config.keep = v;
    }
    if let Some(v) = args.model_upstream.clone() {
        config.model_upstream = Some(rollpoint_gateway::config::Urls::from(v.as_str()));
        config.model_script = None;
    }
    if let Some(v) = args.model_script.clone() {
        config.model_script = Some(v);
        config.model_upstream = None;
    }
    if let Some(v) = args.store {
        config.store = v;
    }
    if let Some(v) = args.supervisor.clone() {
        config.supervisor = Some(v);
    }
    if let Some(v) = args.gateway_port {
        config.gateway_port = v;
    }
    if let Some(v) = args.samples {
        config.samples = v;
    }
    if let Some(v) = args.retry_infra {
        config.retry_infra = v;
    }
    // Absolute, so a resume from another directory finds them.
    let model_paths = config
        .models
        .iter_mut()
        .flat_map(|m| [&mut m.ca_file, &mut m.credential_file]);
    for path in [
        &mut config.model_script,
        &mut config.model_ca_file,
        &mut config.model_credential_file,
    ]
    .into_iter()
    .chain(model_paths)
    .flatten()
    {
        *path = std::path::absolute(&*path)
            .with_context(|| format!("cannot resolve {}", path.display()))?;
    }
    let supervisor = locate::supervisor(config.supervisor.as_ref())?;
    config.supervisor = Some(supervisor.clone());
    config.validate(
        args.config
            .as_deref()
            .unwrap_or(std::path::Path::new("flags")),
    )?;
    if args.or_resume {
        let runtime =
            tokio::runtime::Runtime::new().context("failed to start the async runtime")?;
        if let Some(ending) = runtime.block_on(resume_instead(&args, &config, &supervisor))? {
            runtime.shutdown_timeout(std::time::Duration::from_secs(5));
            return finish(ending);
        }
    }
    let (tasks_path, failed) = match harbor_source(&args.tasks) {
        Some(source) => prepare_harbor(&source, &args, &config)?,
        None => (args.tasks.clone(), HarborFailed::new()),
    };
    let mut tasks = load_tasks(&tasks_path)?.with_samples(config.samples)?;
    tasks.failed = failed;
    let runtime = tokio::runtime::Runtime::new().context("failed to start the async runtime")?;
    let ending = runtime.block_on(async {
        let inputs = inputs(&args.control, &args.stop)?;
        anyhow::Ok(
            rollpoint_run::run(
                &args.run_dir,
                tasks,
                config,
                supervisor,
                harness_env()?,
                inputs,
            )
            .await?,
        )
    })?;
    runtime.shutdown_timeout(std::time::Duration::from_secs(5));
    finish(ending)
}

/// `--or-resume`: resumes the run when the run directory or the checkpoint store already
/// holds it (`None`: neither does; start it).
async fn resume_instead(
    args: &RunArgs,
    config: &RunConfig,
    supervisor: &std::path::Path,
) -> anyhow::Result<Option<Ending>> {
    let env = harness_env()?;
    if rollpoint_run::RunState::path(&args.run_dir).exists() {
        let state = rollpoint_run::RunState::load(&args.run_dir)?;
        if harbor_source(&args.tasks).is_none() {
            let given = load_tasks(&args.tasks)?;
            anyhow::ensure!(
                given.sha256 == state.tasks_sha256,
                "{}: --or-resume: the run in {} was started with other tasks (sha256 {}, this                  file's is {})",
                args.tasks.display(),
                args.run_dir.display(),
                state.tasks_sha256,
                given.sha256
            );
        }
        eprintln!(
            "rollpoint: {} holds this run; resuming it",
            args.run_dir.display()
        );
        let inputs = inputs(&args.control, &args.stop)?;
        let ending = rollpoint_run::resume(
            &args.run_dir,
            None,
            Some(supervisor.to_owned()),
            env,
            inputs,
        )
        .await?;
        return Ok(Some(ending));
    }
    let Some(url) = &config.checkpoint_store else {
        return Ok(None);
    };
    let Some(store) = config.open_checkpoint_store()? else {
        return Ok(None);
    };
    if !rollpoint_run::holds_run(&store).await? {
        return Ok(None);
    }
    eprintln!("rollpoint: the checkpoint store {url} holds this run; resuming it from there");
    let inputs = inputs(&args.control, &args.stop)?;
    let ending = rollpoint_run::resume_from(
        url,
        config.checkpoint_store_options.as_deref(),
        &args.run_dir,
        Some(supervisor.to_owned()),
        env,
        inputs,
    )
    .await?;
    Ok(Some(ending))
}
