//! Subcommands, one file each.

mod bench;
mod demo;
mod locate;

use clap::Subcommand;

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a small process tree under the supervisor, pause it, show that it
    /// is held, and continue it.
    Demo(demo::Args),
    /// Benchmarks, each against its baseline in the same run.
    #[command(subcommand)]
    Bench(bench::Bench),
}

pub fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Demo(args) => demo::run(&args),
        Command::Bench(b) => bench::run(b),
    }
}
