//! Subcommands, one file each.

use clap::Subcommand;

#[derive(Debug, Subcommand)]
pub enum Command {}

pub fn run(command: Command) -> anyhow::Result<()> {
    match command {}
}
