//! `rollpoint exec RUN_DIR ROLLOUT [--while-frozen] -- CMD...`: one command in a live
//! rollout's sandbox, asked of the run's control endpoint (the run must be started with
//! `--listen`; `--control-token-file` is its token). Its stdout and stderr are printed as they
//! were, and its exit code is this command's.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use rollpoint_run::endpoint::exec::{EXEC_VERSION, ExecBody, ExecReply};

/// A live rollout of a run serving its control endpoint.
#[derive(Debug, clap::Args)]
pub struct Target {
    /// The run directory of a run serving its control endpoint.
    pub run_dir: PathBuf,
    /// The rollout.
    pub rollout: String,
    /// The token the run's control endpoint admits.
    #[arg(long)]
    pub control_token_file: PathBuf,
    /// While the rollout is parked (frozen for a checkpoint), use a fork of its latest
    /// snapshot (never the frozen sandbox); the rollout never sees the fork.
    #[arg(long)]
    pub while_frozen: bool,
}

#[derive(Debug, clap::Args)]
pub struct ExecArgs {
    #[command(flatten)]
    pub target: Target,
    /// Its working directory in the sandbox (default: the task's workdir).
    #[arg(long)]
    pub cwd: Option<String>,
    /// Killed after this many seconds (1 to 3600).
    #[arg(long, default_value_t = 60, value_parser = super::number::whole::<u64>(1, 3600))]
    pub timeout_s: u64,
    /// The command and its arguments.
    #[arg(last = true, required = true)]
    pub command: Vec<String>,
}

pub fn run(args: &ExecArgs) -> anyhow::Result<()> {
    let body = ExecBody {
        v: EXEC_VERSION,
        argv: args.command.clone(),
        cwd: args.cwd.clone(),
        timeout_ms: Some(args.timeout_s * 1000),
        stdin: None,
        while_frozen: args.target.while_frozen,
    };
    let path = format!("/v1/rollouts/{}/exec", args.target.rollout);
    let (url, text) = post(
        &args.target.run_dir,
        &args.target.control_token_file,
        &path,
        serde_json::to_string(&body)?,
    )?;
    let reply: ExecReply = serde_json::from_str(&text)
        .with_context(|| format!("{url}: the reply is not an exec reply"))?;
    std::io::stdout().write_all(reply.stdout.as_bytes())?;
    std::io::stderr().write_all(reply.stderr.as_bytes())?;
    if let Some(ck) = &reply.checkpoint {
        eprintln!(
            "rollpoint: ran in sandbox {}, a fork of checkpoint {ck}'s snapshot",
            reply.sandbox
        );
    }
    if reply.timed_out {
        eprintln!(
            "rollpoint: the command ran past {} s and was killed",
            args.timeout_s
        );
    }
    let code = match (reply.exit_code, reply.signal) {
        (Some(c), _) => c,
        (None, Some(s)) => 128 + s,
        (None, None) => 1,
    };
    std::process::exit(code);
}

/// The address of the run's control endpoint (`RUN_DIR/control.json`).
pub fn endpoint(run_dir: &Path) -> anyhow::Result<std::net::SocketAddr> {
    Ok(rollpoint_run::EndpointFile::load(run_dir)
        .with_context(|| {
            format!(
                "{}: no process serves this run's control endpoint (run or resume it with --listen)",
                run_dir.display()
            )
        })?
        .addr)
}

/// Posts the JSON `body` to `path` on the run's control endpoint; the URL and the reply's
/// text (an error naming the URL, the status and the endpoint's message unless 200).
pub fn post(
    run_dir: &Path,
    token_file: &Path,
    path: &str,
    body: String,
) -> anyhow::Result<(String, String)> {
    let token = super::locate::token(token_file)?;
    let url = format!("http://{}{path}", endpoint(run_dir)?);
    let reply = ureq::post(&url)
        .header("authorization", &format!("Bearer {token}"))
        .header("content-type", "application/json")
        .config()
        .http_status_as_error(false)
        .build()
        .send(body)
        .with_context(|| format!("{url}: the run's control endpoint did not answer"))?;
    let status = reply.status().as_u16();
    let text = reply
        .into_body()
        .with_config()
        .limit(64 * 1024 * 1024)
        .read_to_string()
        .with_context(|| format!("{url}: reading the reply"))?;
    if status != 200 {
        let message = serde_json::from_str::<serde_json::Value>(&text)
            .ok()
            .and_then(|v| {
                v.pointer("/error/message")
                    .and_then(|m| m.as_str())
                    .map(str::to_owned)
            })
            .unwrap_or(text);
        bail!("{url} ({status}): {message}");
    }
    Ok((url, text))
}
