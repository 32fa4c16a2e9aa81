//! `rollpoint status RUN_DIR`: tasks, results and rewards, the latest
//! checkpoint and what is not finished, read from the run directory.

use std::path::PathBuf;

#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    /// The run directory.
    pub run_dir: PathBuf,
    /// Print one versioned JSON document instead of text.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: &StatusArgs) -> anyhow::Result<()> {
    let status = rollpoint_run::status::read_status(&args.run_dir)?;
    if args.json {
        println!("{}", status.to_json());
    } else {
        print!("{status}");
    }
    Ok(())
}
