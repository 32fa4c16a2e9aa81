//! Subcommands, one file each.

mod worker;

use clap::Subcommand;

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the native agent worker (inside a sandbox).
    Worker(worker::WorkerArgs),
}

pub fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Worker(args) => worker::run(args),
    }
}
