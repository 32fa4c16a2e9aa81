//! The run's gateway as a process of its own (`rollpoint gateway`), so that it and its ledger
//! outlive a crash of the runner. When the runner dies, the harnesses' sandboxes freeze and
//! the gateway, which watches its parent, takes no new call, reads every call already sent
//! upstream to its end, commits it and exits. `rollpoint resume` waits until that gateway is
//! gone, then starts the next on the same ledger and port, and the resumed attempts get those
//! replies from the ledger instead of asking the model again.
//!
//! Files under `RUN_DIR/gateway/`: `ledger.sqlite`; `process.json` (`{v, pid, port}`, written
//! once the gateway listens); `control.token` (the bearer token of its control routes, new
//! for each process, mode 0600); `gateway.log` (its stderr); `port`; `models.json` (the run's
//! `[[models]]`, keys named by variable or path only); `route.key` (the run's route key, mode
//! 0600, made at the first start and kept: each attempt's route secret comes from it);
//! `attach.sock` (mode 0600: the sandboxes' anchors hand it the listener each makes in its
//! network namespace, so a model call takes no relay).

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use rollpoint_checkpoint::{HttpParticipant, ParticipantApi};
use rollpoint_gateway::GatewayClient;
use rollpoint_proto::key::AttemptKey;
use serde::{Deserialize, Serialize};

use crate::config::{ModelApi, RunConfig};
use crate::errors::RunError;
use crate::files::state::write_atomic;

/// The gateway's directory under the run directory.
pub const GATEWAY_DIR: &str = "gateway";
/// The gateway's call ledger.
pub const LEDGER: &str = "gateway/ledger.sqlite";
/// The scripted model's request log (one JSON line per request, all runs).
pub const MODEL_LOG: &str = "model-script.log";
const PROCESS: &str = "gateway/process.json";
const TOKEN: &str = "gateway/control.token";
const LOG: &str = "gateway/gateway.log";
const MODELS: &str = "gateway/models.json";
/// The run's route key (`rollpoint_proto::route`), made once and kept across resumes.
pub const ROUTE_KEY: &str = "gateway/route.key";
/// The fleet's state (`crate::run_loop::fleet`): the policy version it last continued under and
/// whether it is paused, so a gateway started after a crash tags with that version and holds
/// its calls until the trainer continues.
const FLEET: &str = "gateway/fleet.json";
/// Version of `fleet.json`.
const FLEET_VERSION: u32 = 1;

/// `RUN_DIR/gateway/fleet.json`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FleetRecord {
    pub v: u32,
    #[serde(default)]
    pub version: Option<String>,
    /// While paused: what calls generating at the pause do.
    #[serde(default)]
    pub paused: Option<rollpoint_api::wire::InFlightCalls>,
}

impl FleetRecord {
    /// The run's fleet state (nothing paused, no version, before the first pause or
    /// continue).
    pub fn load(run_dir: &Path) -> Result<Self, RunError> {
        let path = run_dir.join(FLEET);
        let Ok(bytes) = std::fs::read(&path) else {
            return Ok(Self {
                v: FLEET_VERSION,
                ..Self::default()
            });
        };
        rollpoint_proto::decode("fleet record", FLEET_VERSION, &bytes)
            .map_err(|e| RunError::state(path, e))
    }

    /// Writes it (atomic, 0600).
    pub fn save(&self, run_dir: &Path) -> Result<(), RunError> {
        let path = run_dir.join(FLEET);
        let bytes = serde_json::to_vec(self).map_err(|e| RunError::state(path.clone(), e))?;
        write_atomic(&path, &bytes)
    }
}

/// The socket on which sandboxes' anchors hand their gateway listeners to the gateway.
pub const ATTACH: &str = "gateway/attach.sock";

/// Version of `process.json`.
const PROCESS_VERSION: u32 = 1;

/// How long a gateway whose runner died may take to record its calls (its `--drain-s`).
const DRAIN: Duration = Duration::from_secs(600);
/// How long a new gateway waits for its port while an older one frees it.
const BIND_WAIT: Duration = Duration::from_secs(30);
/// How long a gateway may take to start listening.
const START: Duration = Duration::from_secs(60);
/// How long a gateway may take to stop once asked (SIGUSR2) before it is killed.
const STOP: Duration = Duration::from_secs(30);

/// `RUN_DIR/gateway/process.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ProcessRecord {
    v: u32,
    pid: u32,
    port: u16,
}

/// Where the model comes from.
#[derive(Debug, Clone)]
pub enum Upstream {
    /// A model server the gateway forwards to (its replicas).
    Url(Vec<String>),
    /// A model script the gateway process serves itself.
    Script(PathBuf),
}

/// A running gateway process of the run.
#[derive(Debug)]
pub struct GatewayProcess {
    child: tokio::process::Child,
    pid: u32,
    port: u16,
    token: String,
    client: GatewayClient,
    run_dir: PathBuf,
    route_key: rollpoint_proto::route::RouteKey,
}

/// 32 random bytes from the kernel, as hex.
fn fresh_token() -> Result<String, RunError> {
    let mut bytes = [0u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(|e| RunError::io("/dev/urandom", e))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Whether `pid` is a live gateway process serving `ledger`.
fn is_gateway_of(pid: u32, ledger: &Path) -> bool {
    let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
        return false;
    };
    // A zombie has an empty command line: it is gone.
    let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
    args.contains(&b"gateway".as_slice()) && args.contains(&ledger.as_os_str().as_encoded_bytes())
}

/// The last lines of the gateway's log, for an error.
fn log_tail(run_dir: &Path) -> String {
    let text = std::fs::read_to_string(run_dir.join(LOG)).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(5)..].join("\n")
}

/// Waits until the gateway `process.json` names (a crashed runner's) is gone: it is
/// recording the calls it had sent upstream, and the next gateway must find them in the
/// ledger.
async fn wait_previous(run_dir: &Path) -> Result<(), RunError> {
    let path = run_dir.join(PROCESS);
    let Ok(bytes) = std::fs::read(&path) else {
        return Ok(());
    };
    let record: ProcessRecord =
        rollpoint_proto::decode("gateway process record", PROCESS_VERSION, &bytes)
            .map_err(|e| RunError::state(path.clone(), e))?;
    let ledger = run_dir.join(LEDGER);
    if !is_gateway_of(record.pid, &ledger) {
        return Ok(());
    }
    tracing::info!(
        pid = record.pid,
        "the previous gateway is still recording the calls it sent upstream; waiting for it"
    );
    let until = Instant::now() + DRAIN + STOP;
    while is_gateway_of(record.pid, &ledger) {
        if Instant::now() >= until {
            return Err(RunError::setup(
                "gateway",
                format!(
                    "the previous gateway (pid {}, {}) did not exit within {}s",
                    record.pid,
                    path.display(),
                    (DRAIN + STOP).as_secs()
                ),
            ));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

/// The files one start of the gateway is handed: where it writes its port, its control
/// token and the run's route key.
struct StartFiles {
    port: PathBuf,
    token: PathBuf,
    route_key: PathBuf,
}

/// A port file of this start's own: a gateway started by a runner killed before it recorded
/// it in process.json is not waited for, and may still write a shared file (the same port
/// number) just before it sees its owner gone and exits. Those of earlier starts (and the
/// shared `port` of older versions) are dropped.
fn fresh_port_file(dir: &Path) -> PathBuf {
    let nonce = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let port_file = dir.join(format!("port-{}-{nonce}", std::process::id()));
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let name = e.file_name();
            let name = name.to_string_lossy();
            if name == "port" || name.starts_with("port-") {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
    port_file
}

/// `program gateway` on the run's ledger, listening on 127.0.0.1:`port`, watching this
/// process as its owner.
fn base_command(
    program: &Path,
    run_dir: &Path,
    config: &RunConfig,
    port: u16,
    files: &StartFiles,
) -> tokio::process::Command {
    let api = match config.model_api {
        ModelApi::All => "all",
        ModelApi::Openai => "openai",
        ModelApi::Anthropic => "anthropic",
    };
    let mut cmd = tokio::process::Command::new(program);
    cmd.arg("gateway")
        .arg("--db")
        .arg(run_dir.join(LEDGER))
        .args(["--api", api])
        .arg("--listen")
        .arg(format!("127.0.0.1:{port}"))
        .arg("--bind-wait-s")
        .arg(BIND_WAIT.as_secs().to_string())
        .arg("--port-file")
        .arg(&files.port)
        .arg("--attach-socket")
        .arg(run_dir.join(ATTACH))
        .arg("--run-dir")
        .arg(run_dir)
        .arg("--control-token-file")
        .arg(&files.token)
        .arg("--route-key-file")
        .arg(&files.route_key)
        .arg("--owner")
        .arg(std::process::id().to_string())
        .arg("--drain-s")
        .arg(DRAIN.as_secs().to_string());
    cmd
}

/// Where the model comes from: the upstream's replicas, or the script the gateway serves.
fn add_upstream(cmd: &mut tokio::process::Command, run_dir: &Path, upstream: &Upstream) {
    match upstream {
        Upstream::Url(urls) => {
            for url in urls {
                cmd.arg("--upstream").arg(url);
            }
        }
        Upstream::Script(path) => {
            cmd.arg("--model-script")
                .arg(path)
                .arg("--model-log")
                .arg(run_dir.join(MODEL_LOG));
        }
    }
}

/// The fleet's state: the policy version it last continued under, and whether it is paused.
fn add_fleet(cmd: &mut tokio::process::Command, run_dir: &Path) -> Result<(), RunError> {
    let fleet = FleetRecord::load(run_dir)?;
    if let Some(version) = &fleet.version {
        cmd.arg("--policy-version").arg(version);
    }
    if let Some(calls) = fleet.paused {
        cmd.arg("--paused").arg(match calls {
            rollpoint_api::wire::InFlightCalls::Finish => "finish",
            rollpoint_api::wire::InFlightCalls::Abort => "abort",
        });
    }
    Ok(())
}

/// The config's model settings (`[[models]]` written to `models.json`), its checkpoint store
/// and its cap on upstream calls.
fn add_options(
    cmd: &mut tokio::process::Command,
    run_dir: &Path,
    config: &RunConfig,
) -> Result<(), RunError> {
    if !config.model_sticky {
        cmd.arg("--no-sticky");
    }
    cmd.arg("--retry-s")
        .arg(config.model_retry_s.to_string())
        .arg("--outage-s")
        .arg(config.model_outage_s.to_string());
    if let Some(ca) = &config.model_ca_file {
        cmd.arg("--ca-file").arg(ca);
    }
    // The key's name or path only: a command line is readable by every user.
    if let Some(name) = &config.model_credential_env {
        cmd.arg("--credential-env").arg(name);
    }
    if let Some(path) = &config.model_credential_file {
        cmd.arg("--credential-file").arg(path);
    }
    if !config.models.is_empty() {
        let file = rollpoint_gateway::config::ModelsFile {
            v: rollpoint_gateway::config::MODELS_VERSION,
            models: config.models.clone(),
        };
        let path = run_dir.join(MODELS);
        let text =
            serde_json::to_string_pretty(&file).map_err(|e| RunError::setup("gateway", e))?;
        write_atomic(&path, text.as_bytes())?;
        cmd.arg("--models").arg(path);
    }
    if let Some(source) = config.model_tokens {
        cmd.arg("--model-tokens").arg(source.name());
        if let (Some(tokenizer), Some(template)) =
            (&config.model_tokenizer, &config.model_chat_template)
        {
            cmd.arg("--tokenizer")
                .arg(tokenizer)
                .arg("--chat-template")
                .arg(template);
        }
        if !config.model_logprobs {
            cmd.arg("--no-model-logprobs");
        }
    }
    if let Some(url) = &config.checkpoint_store {
        cmd.arg("--checkpoint-store").arg(url);
    }
    if let Some(path) = &config.checkpoint_store_options {
        cmd.arg("--checkpoint-store-options").arg(path);
    }
    if config.model_max_calls > 0 {
        cmd.arg("--max-upstream-calls")
            .arg(config.model_max_calls.to_string());
    }
    Ok(())
}

/// Waits for the port the gateway `child` (pid `pid`) writes to `port_file` once it
/// listens; an exit before, or no port in time, is an error quoting its log.
async fn wait_listening(
    child: &mut tokio::process::Child,
    pid: u32,
    port_file: &Path,
    run_dir: &Path,
    log_path: &Path,
) -> Result<u16, RunError> {
    let until = Instant::now() + START + BIND_WAIT;
    loop {
        if let Ok(text) = std::fs::read_to_string(port_file)
            && let Ok(port) = text.trim().parse::<u16>()
        {
            let _ = std::fs::remove_file(port_file);
            return Ok(port);
        }
        if let Some(status) = child
            .try_wait()
            .map_err(|e| RunError::setup("gateway", e))?
        {
            return Err(RunError::setup(
                "gateway",
                format!(
                    "the gateway (pid {pid}) exited ({status}) before listening; {}:\n{}",
                    log_path.display(),
                    log_tail(run_dir)
                ),
            ));
        }
        if Instant::now() >= until {
            let _ = child.start_kill();
            return Err(RunError::setup(
                "gateway",
                format!(
                    "the gateway (pid {pid}) did not listen within {}s; see {}",
                    (START + BIND_WAIT).as_secs(),
                    log_path.display()
                ),
            ));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

impl GatewayProcess {
    /// Starts `program gateway` for the run on 127.0.0.1:`port` (0: any), after any
    /// previous gateway of the run is gone.
    pub async fn start(
        run_dir: &Path,
        config: &RunConfig,
        program: &Path,
        upstream: &Upstream,
        port: u16,
    ) -> Result<Self, RunError> {
        let dir = run_dir.join(GATEWAY_DIR);
        std::fs::create_dir_all(&dir).map_err(|e| RunError::io(&dir, e))?;
        wait_previous(run_dir).await?;
        let token = fresh_token()?;
        let token_file = run_dir.join(TOKEN);
        write_atomic(&token_file, token.as_bytes())?;
        let route_key_file = run_dir.join(ROUTE_KEY);
        let route_key = rollpoint_gateway::route_key::load_or_create(&route_key_file)
            .map_err(|e| RunError::setup("gateway", e))?;
        let files = StartFiles {
            port: fresh_port_file(&dir),
            token: token_file,
            route_key: route_key_file,
        };
        let log_path = run_dir.join(LOG);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(|e| RunError::io(&log_path, e))?;
        let mut cmd = base_command(program, run_dir, config, port, &files);
        add_upstream(&mut cmd, run_dir, upstream);
        add_fleet(&mut cmd, run_dir)?;
        add_options(&mut cmd, run_dir, config)?;
        // Its own process group: a ^C meant for the runner does not stop the gateway; the
        // runner stops it at the end.
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .process_group(0);
        let mut child = cmd.spawn().map_err(|e| {
            RunError::setup(
                "gateway",
                format!("cannot start {}: {e}", program.display()),
            )
        })?;
        let pid = child
            .id()
            .ok_or_else(|| RunError::setup("gateway", "the gateway exited at once"))?;
        let port = wait_listening(&mut child, pid, &files.port, run_dir, &log_path).await?;
        let record = ProcessRecord {
            v: PROCESS_VERSION,
            pid,
            port,
        };
        let text = serde_json::to_string(&record).map_err(|e| RunError::setup("gateway", e))?;
        write_atomic(&run_dir.join(PROCESS), text.as_bytes())?;
        let client = GatewayClient::new(&format!("http://127.0.0.1:{port}"), &token)
            .map_err(|e| RunError::setup("gateway", e))?;
        Ok(Self {
            child,
            pid,
            port,
            token,
            client,
            run_dir: run_dir.to_owned(),
            route_key,
        })
    }

    /// The run's route key: launches carry their attempt's secret from it.
    #[must_use]
    pub fn route_key(&self) -> &rollpoint_proto::route::RouteKey {
        &self.route_key
    }

    /// The port it listens on.
    #[must_use]
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Its checkpoint control routes, as the run's `model` participant.
    pub fn control(&self) -> Result<Arc<dyn ParticipantApi>, RunError> {
        HttpParticipant::new(&format!("http://127.0.0.1:{}", self.port), &self.token)
            .map(|c| Arc::new(c) as Arc<dyn ParticipantApi>)
            .map_err(|e| RunError::setup("gateway control", e))
    }

    /// What the ledger says of attempts' last calls, for the drivers.
    #[must_use]
    /// A client of its control routes.
    pub fn client(&self) -> GatewayClient {
        self.client.clone()
    }

    pub fn health(&self) -> Arc<dyn rollpoint_driver::ModelHealth> {
        Arc::new(LedgerHealth {
            client: self.client.clone(),
        })
    }

    /// Lets `key`'s attempt call the model (an earlier attempt of the rollout is fenced).
    pub async fn register(&self, key: &AttemptKey) -> Result<(), RunError> {
        self.client
            .register(std::slice::from_ref(key))
            .await
            .map_err(|e| {
                RunError::rollout(
                    key.rollout().to_string(),
                    format!("gateway registration of {key}: {e}"),
                )
            })
    }

    /// Stops the gateway (SIGUSR2, the signal a gateway with `--owner` stops on: it ignores
    /// SIGTERM and SIGINT, which a scheduler or a terminal sends the whole job; SIGKILL after
    /// a while) and waits for it.
    pub async fn stop(mut self) {
        let pid = Pid::from_raw(i32::try_from(self.pid).unwrap_or(i32::MAX));
        let _gone = kill(pid, Signal::SIGUSR2);
        if tokio::time::timeout(STOP, self.child.wait()).await.is_err() {
            tracing::warn!(
                pid = self.pid,
                waited_s = STOP.as_secs(),
                "the gateway did not stop in time; killing it"
            );
            let _gone = self.child.kill().await;
        }
        let _gone = std::fs::remove_file(self.run_dir.join(PROCESS));
    }
}

/// [`rollpoint_driver::ModelHealth`] from the gateway's ledger: the
/// attempt's last call, in the order the gateway admitted them.
#[derive(Debug)]
struct LedgerHealth {
    client: GatewayClient,
}

/// Whether `call` got no answer from the upstream: unreachable, broken off
/// mid-reply, or refused as overloaded or unavailable (429, 502, 503, 504).
pub(crate) fn unanswered(call: &rollpoint_gateway::CallRecord) -> Option<String> {
    use rollpoint_gateway::CallStatus;
    let overloaded = matches!(call.http_status, Some(429 | 502 | 503 | 504));
    match call.status {
        CallStatus::UpstreamUnreachable | CallStatus::UpstreamBroken => Some(format!(
            "call {} {}: {}",
            call.call_id,
            call.status.as_str(),
            call.error.as_deref().unwrap_or("no detail")
        )),
        CallStatus::UpstreamStatus if overloaded => Some(format!(
            "call {} answered {} by the upstream",
            call.call_id,
            call.http_status.unwrap_or_default()
        )),
        _ => None,
    }
}

impl rollpoint_driver::ModelHealth for LedgerHealth {
    fn last_call_unanswered<'a>(
        &'a self,
        rollout: &'a str,
        attempt: u32,
    ) -> futures_util::future::BoxFuture<'a, Option<String>> {
        Box::pin(async move {
            let records = match self.client.records(rollout).await {
                Ok(r) => r,
                Err(e) => {
                    tracing::warn!(rollout, attempt, error = %e, "the ledger could not be read; the rollout is graded");
                    return None;
                }
            };
            let last = records.iter().rev().find_map(|r| match r {
                rollpoint_gateway::LedgerRecord::Call(c) if c.attempt == attempt => Some(c),
                _ => None,
            })?;
            unanswered(last)
        })
    }
}
