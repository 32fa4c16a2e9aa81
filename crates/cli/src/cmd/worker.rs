//! `rollpoint worker INPUT RESULT --checkpoint CHECKPOINT`: the native agent worker, the same
//! entry point as the static `rollpoint-worker` binary.

use std::path::PathBuf;

use clap::Args;

/// Run the native agent worker on one rollout's input.
#[derive(Debug, Args)]
pub struct WorkerArgs {
    /// The rollout's input file.
    pub input: PathBuf,
    /// Where the result is written (atomically, mode 0600).
    pub result: PathBuf,
    /// The checkpoint journal: continued from when it exists.
    #[arg(long)]
    pub checkpoint: PathBuf,
}

/// Runs the worker and exits with its code (see `rollpoint_worker::exit`).
pub fn run(args: WorkerArgs) -> anyhow::Result<()> {
    let code = rollpoint_worker::run(&rollpoint_worker::Invocation {
        input: args.input,
        result: args.result,
        checkpoint: args.checkpoint,
    });
    std::process::exit(code);
}
