//! `rollpoint export RUN_DIR [--format jsonl|parquet] [--out FILE]`: the run's trajectories,
//! one document per line or one Parquet row per segment (docs/design/tokens.md).

use std::io::Write as _;
use std::path::PathBuf;

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum Format {
    /// One trajectory document per line.
    Jsonl,
    /// One row per segment of the merged view (tokens, loss mask, logprobs, reward).
    Parquet,
}

#[derive(Debug, clap::Args)]
pub struct ExportArgs {
    /// The run directory.
    pub run_dir: PathBuf,
    #[arg(long, value_enum, default_value = "jsonl")]
    pub format: Format,
    /// Where to write them (atomically, mode 0600); default: standard output.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

pub fn run(args: &ExportArgs) -> anyhow::Result<()> {
    if !args.run_dir.is_dir() {
        anyhow::bail!("{}: not a run directory", args.run_dir.display());
    }
    let format = match args.format {
        Format::Jsonl => rollpoint_run::export::Format::Jsonl,
        Format::Parquet => rollpoint_run::export::Format::Parquet,
    };
    let (bytes, n) = rollpoint_run::export::export(&args.run_dir, format, args.out.as_deref())?;
    match &args.out {
        Some(path) => {
            tracing::info!(trajectories = n, path = %path.display(), "trajectories written")
        }
        None => std::io::stdout().write_all(&bytes)?,
    }
    Ok(())
}
