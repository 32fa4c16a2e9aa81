//! The `rollpoint` host binary: one process for the embedded default, or one
//! service per process. Each subcommand lives in its own file under `cmd/`.
#![forbid(unsafe_code)]

mod cmd;

use clap::Parser;

/// Runs coding-agent harnesses in sandboxes and checkpoints every in-flight rollout.
#[derive(Debug, Parser)]
#[command(name = "rollpoint", version, about)]
struct Cli {
    #[command(subcommand)]
    command: cmd::Command,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    cmd::run(cli.command)
}
