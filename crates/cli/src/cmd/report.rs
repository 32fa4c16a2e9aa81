//! `rollpoint report RUN_DIR [--out FILE]`: one self-contained HTML page of a run.

use std::path::PathBuf;

#[derive(Debug, clap::Args)]
pub struct ReportArgs {
    /// The run directory.
    pub run_dir: PathBuf,
    /// Where to write the page (default: RUN_DIR/report.html).
    #[arg(long)]
    pub out: Option<PathBuf>,
}

pub fn run(args: &ReportArgs) -> anyhow::Result<()> {
    let path = rollpoint_run::report::write_report(&args.run_dir, args.out.as_deref())?;
    println!("{}", path.display());
    Ok(())
}
