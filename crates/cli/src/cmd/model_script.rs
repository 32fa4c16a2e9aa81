//! `rollpoint model-script`: runs the scripted model server, so harnesses, tests and the
//! quickstart have a model with no GPU and no network.

use std::io::Write as _;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use clap::Args;
use rollpoint_model_script::{Script, ScriptServer};

/// Serve a scripted model (chat completions, Responses, Anthropic Messages).
#[derive(Debug, Args)]
#[command(group = clap::ArgGroup::new("bind").required(true).args(["port", "port_file"]))]
pub struct ModelScriptArgs {
    /// The script (versioned JSON) saying what to answer at each step.
    #[arg(long)]
    script: PathBuf,
    /// Port to listen on, on 127.0.0.1.
    #[arg(long)]
    port: Option<u16>,
    /// Listen on a free port and write its number to this file (atomically).
    #[arg(long)]
    port_file: Option<PathBuf>,
    /// Append one JSON line per request to this file.
    #[arg(long)]
    log: Option<PathBuf>,
    /// Answer in vLLM's token shapes (token ids and logprobs when a request asks), as the
    /// script's `tokens` does.
    #[arg(long)]
    tokens: bool,
    /// Answer the first generation requests as a failing replica would, in order, before
    /// the script answers: `cut` (a stream cut before its first byte), `STATUS` or
    /// `STATUS:RETRY_AFTER_S` (e.g. `429:1,503,cut`).
    #[arg(long, value_delimiter = ',')]
    outages: Vec<rollpoint_model_script::Outage>,
    /// Serve `POST /v1/completions` on token ids under this `tokenizer.json`, reading the
    /// prompt as a Hermes-style chat template renders it (token-in/token-out upstreams).
    #[arg(long)]
    tokenizer: Option<PathBuf>,
}

pub fn run(args: ModelScriptArgs) -> anyhow::Result<()> {
    let mut script = Script::load(&args.script)?;
    if args.tokens {
        script.tokens.get_or_insert_default();
    }
    let runtime = tokio::runtime::Runtime::new().context("failed to start the async runtime")?;
    runtime.block_on(async {
        let addr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), args.port.unwrap_or(0));
        let server = ScriptServer::start(script, addr, args.log).await?;
        server.queue_outages(args.outages.iter().copied());
        if let Some(path) = &args.tokenizer {
            server.serve_completions(path)?;
        }
        if let Some(file) = &args.port_file {
            write_port_file(file, server.addr().port())?;
        }
        tracing::info!(
            script = %args.script.display(),
            url = %server.base_url(),
            "serving the scripted model"
        );
        tokio::select! {
            () = server.wait() => {}
            r = stop_signal() => r?,
        }
        Ok(())
    })
}

/// Writes `port` to `path` atomically (temp file, fsync, rename, fsync of the directory),
/// mode 0600.
pub fn write_port_file(path: &Path, port: u16) -> anyhow::Result<()> {
    let mut file = atomic_write_file::AtomicWriteFile::open(path)
        .with_context(|| format!("failed to create port file {}", path.display()))?;
    file.as_file()
        .set_permissions(std::fs::Permissions::from_mode(0o600))
        .with_context(|| format!("failed to set the mode of port file {}", path.display()))?;
    writeln!(file, "{port}")
        .with_context(|| format!("failed to write port file {}", path.display()))?;
    file.commit()
        .with_context(|| format!("failed to commit port file {}", path.display()))
}

/// Resolves on SIGINT or SIGTERM.
pub async fn stop_signal() -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).context("failed to watch SIGTERM")?;
    let mut int = signal(SignalKind::interrupt()).context("failed to watch SIGINT")?;
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    Ok(())
}
