//! `rollpoint resume RUN_DIR`: continues a run after a crash or a stop.
//! Orphaned sandboxes are swept first; finished rollouts are never run
//! again; those in the newest intact checkpoint (or the one `--checkpoint`
//! names) continue from it as their next attempt; the rest start over as
//! their next attempt. With `--from STORE_URL --run-dir NEW_DIR`, a machine that has nothing
//! of the run continues it from its checkpoint store alone.

use std::path::PathBuf;

use anyhow::Context as _;

use super::run::{EndpointArgs, StopArgs, finish, harness_env, inputs};

#[derive(Debug, clap::Args)]
pub struct ResumeArgs {
    /// The run directory `rollpoint run` wrote.
    #[arg(
        required_unless_present = "run_dir_flag",
        conflicts_with = "run_dir_flag"
    )]
    pub run_dir: Option<PathBuf>,
    /// The run directory, as a flag (with `--from`: a new, empty one).
    #[arg(long = "run-dir", value_name = "DIR")]
    pub run_dir_flag: Option<PathBuf>,
    /// Continue the run the checkpoint store at this URL holds, on a machine that
    /// has nothing of it: its definition and checkpoints come from the store,
    /// once the process that held it released it or was silent for its lease.
    #[arg(long, value_name = "STORE_URL", conflicts_with = "checkpoint")]
    pub from: Option<String>,
    /// With `--from`: the store's `KEY=VALUE` settings and credentials (mode
    /// 0600 or 0400).
    #[arg(long, value_name = "FILE", requires = "from")]
    pub store_options: Option<PathBuf>,
    /// Restore from this published checkpoint (an id under
    /// RUN_DIR/checkpoints) instead of the newest intact one; one unknown or
    /// damaged is an error and nothing is changed.
    #[arg(long, value_name = "ID")]
    pub checkpoint: Option<String>,
    /// The static supervisor binary (default: the one the run used).
    #[arg(long)]
    pub supervisor: Option<PathBuf>,
    #[command(flatten)]
    pub stop: StopArgs,
    #[command(flatten)]
    pub control: EndpointArgs,
}

pub fn run(args: &ResumeArgs) -> anyhow::Result<()> {
    let run_dir = args
        .run_dir
        .as_ref()
        .or(args.run_dir_flag.as_ref())
        .context("give the run directory")?;
    let runtime = tokio::runtime::Runtime::new().context("failed to start the async runtime")?;
    let ending = runtime.block_on(async {
        let inputs = inputs(&args.control, &args.stop)?;
        let ending = match &args.from {
            Some(url) => {
                // This machine's supervisor: the one the run used was another machine's.
                rollpoint_run::resume_from(
                    url,
                    args.store_options.as_deref(),
                    run_dir,
                    Some(super::locate::supervisor(args.supervisor.as_ref())?),
                    harness_env()?,
                    inputs,
                )
                .await?
            }
            None => {
                rollpoint_run::resume(
                    run_dir,
                    args.checkpoint.as_deref(),
                    args.supervisor.clone(),
                    harness_env()?,
                    inputs,
                )
                .await?
            }
        };
        anyhow::Ok(ending)
    })?;
    runtime.shutdown_timeout(std::time::Duration::from_secs(5));
    finish(ending)
}
