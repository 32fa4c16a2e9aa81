//! `rollpoint fork RUN_DIR --checkpoint ID --rollout R --n N`: N new rollouts `R~<i>` (the
//! lowest free numbers), each made from what checkpoint ID saved of R. A run that a process
//! drives is asked over its control endpoint (`--control-token-file`, the token it was
//! started with) and the branches' ids are printed; a run no process drives is resumed with
//! the fork, to its end, as `rollpoint resume` would.

use std::path::PathBuf;

use anyhow::{Context as _, bail};
use rollpoint_api::wire::{ForkReply, ForkRequest, WIRE_VERSION};

use super::run::{EndpointArgs, StopArgs, finish, harness_env, inputs};

#[derive(Debug, clap::Args)]
pub struct ForkArgs {
    /// The run directory.
    pub run_dir: PathBuf,
    /// A published checkpoint of the run (an id under RUN_DIR/checkpoints).
    #[arg(long, value_name = "ID")]
    pub checkpoint: String,
    /// The rollout to fork; the checkpoint must have saved it.
    #[arg(long)]
    pub rollout: String,
    /// How many branches, 1..=256.
    #[arg(long, default_value_t = 1,
          value_parser = super::number::whole::<u32>(1, u64::from(rollpoint_api::wire::MAX_FORK_N)))]
    pub n: u32,
    /// For a run a process drives: the token its control endpoint admits.
    #[arg(long)]
    pub control_token_file: Option<PathBuf>,
}

pub fn run(args: &ForkArgs) -> anyhow::Result<()> {
    let request = ForkRequest {
        v: WIRE_VERSION,
        checkpoint: args.checkpoint.clone(),
        rollout: args.rollout.clone(),
        n: args.n,
    };
    request.check().map_err(|e| anyhow::anyhow!("{e}"))?;
    if rollpoint_run::claim::lock::RunLock::held_elsewhere(&args.run_dir)? {
        return ask_live(args, &request);
    }
    let runtime = tokio::runtime::Runtime::new().context("failed to start the async runtime")?;
    let ending = runtime.block_on(async {
        let mut inputs = inputs(
            &EndpointArgs {
                listen: None,
                control_token_file: None,
            },
            &StopArgs { grace_s: None },
        )?;
        inputs.forks.push(request);
        anyhow::Ok(rollpoint_run::resume(&args.run_dir, None, None, harness_env()?, inputs).await?)
    })?;
    runtime.shutdown_timeout(std::time::Duration::from_secs(5));
    finish(ending)
}

/// Asks the live run's control endpoint for the fork and prints the branches.
fn ask_live(args: &ForkArgs, request: &ForkRequest) -> anyhow::Result<()> {
    let Some(token_file) = &args.control_token_file else {
        bail!(
            "{}: a process drives this run: give its control endpoint's token with --control-token-file",
            args.run_dir.display()
        );
    };
    let (url, text) = super::exec::post(
        &args.run_dir,
        token_file,
        "/v1/coordinator/fork",
        serde_json::to_string(request)?,
    )
    .context("the run refused the fork")?;
    let made: ForkReply = serde_json::from_str(&text)
        .with_context(|| format!("{url}: the reply is not a fork reply"))?;
    for b in &made.branches {
        println!("{b}");
    }
    Ok(())
}
