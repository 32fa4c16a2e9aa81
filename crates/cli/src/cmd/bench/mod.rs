//! `rollpoint bench ...`: benchmarks that print median, min and max and the
//! ratio against a baseline measured in the same run (the machine is shared
//! and noisy, so ratios are what count).

mod pause;
mod stats;

use clap::Subcommand;

#[derive(Debug, Subcommand)]
pub enum Bench {
    /// Time to a confirmed pause and continue, per strategy and tree size,
    /// against a Python SIGSTOP walker; plus the supervisor's size, RSS and
    /// start-up time.
    Pause(pause::Args),
}

pub fn run(bench: Bench) -> anyhow::Result<()> {
    match bench {
        Bench::Pause(args) => pause::run(&args),
    }
}
