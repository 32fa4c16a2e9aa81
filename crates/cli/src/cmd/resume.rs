//! `rollpoint resume RUN_DIR`: continues a run after a crash or a stop.
//! Orphaned sandboxes are swept first; finished rollouts are never run
//! again; those in the newest intact checkpoint (or the one `--checkpoint`
//! names) continue from it as their next attempt; the rest start over as
//! their next attempt.

use std::path::PathBuf;

use anyhow::Context as _;

use super::run::{EndpointArgs, finish, harness_env, inputs};

#[derive(Debug, clap::Args)]
pub struct ResumeArgs {
    /// The run directory `rollpoint run` wrote.
    pub run_dir: PathBuf,
    /// Restore from this published checkpoint (an id under
    /// RUN_DIR/checkpoints) instead of the newest intact one; one unknown or
    /// damaged is an error and nothing is changed.
    #[arg(long, value_name = "ID")]
    pub checkpoint: Option<String>,
    /// The static supervisor binary (default: the one the run used).
    #[arg(long)]
    pub supervisor: Option<PathBuf>,
    #[command(flatten)]
    pub control: EndpointArgs,
}

pub fn run(args: &ResumeArgs) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Runtime::new().context("failed to start the async runtime")?;
    let ending = runtime.block_on(async {
        let inputs = inputs(&args.control)?;
        anyhow::Ok(
            rollpoint_run::resume(
                &args.run_dir,
                args.checkpoint.as_deref(),
                args.supervisor.clone(),
                harness_env()?,
                inputs,
            )
            .await?,
        )
    })?;
    runtime.shutdown_timeout(std::time::Duration::from_secs(5));
    finish(ending)
}
