//! `rollpoint bench ...`: benchmarks that print median, min and max and the
//! ratio against a baseline measured in the same run (the machine is shared
//! and noisy, so ratios are what count).

mod checkpoint;
mod pause;
mod stats;

use clap::Subcommand;

#[derive(Debug, Subcommand)]
pub enum Bench {
    /// Time to a confirmed pause and continue, per strategy and tree size,
    /// against a Python SIGSTOP walker; plus the supervisor's size, RSS and
    /// start-up time.
    Pause(pause::Args),
    /// Checkpoints of 128, 512 and 1,024 in-flight rollouts through the real
    /// `rollpoint run` stack (prepare, commit, per rollout), start-up, the
    /// supervisors' memory per sandbox and a resume, against freezing,
    /// tarring and thawing the same sandboxes one after another.
    Checkpoint(checkpoint::Args),
}

pub fn run(bench: Bench) -> anyhow::Result<()> {
    match bench {
        Bench::Pause(args) => pause::run(&args),
        Bench::Checkpoint(args) => checkpoint::run(&args),
    }
}
