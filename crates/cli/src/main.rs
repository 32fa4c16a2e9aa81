//! The `rollpoint` host binary.
#![forbid(unsafe_code)]

use clap::Parser;

/// Runs coding-agent harnesses in sandboxes and checkpoints every in-flight rollout.
#[derive(Debug, Parser)]
#[command(name = "rollpoint", version)]
struct Cli {}

fn main() -> anyhow::Result<()> {
    let _cli = Cli::parse();
    Ok(())
}
