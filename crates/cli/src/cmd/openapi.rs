//! `rollpoint openapi [--out FILE]`: the OpenAPI 3.1 description of every
//! HTTP API (docs/openapi.json is its checked-in copy), as pretty JSON, to
//! stdout or written atomically to FILE.

use std::io::Write as _;
use std::path::PathBuf;

use anyhow::Context as _;

#[derive(Debug, clap::Args)]
pub struct OpenapiArgs {
    /// Write the document to this file (atomically) instead of stdout.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
}

pub fn run(args: &OpenapiArgs) -> anyhow::Result<()> {
    let text = crate::openapi::json()?;
    let Some(path) = &args.out else {
        let mut stdout = std::io::stdout().lock();
        stdout
            .write_all(text.as_bytes())
            .and_then(|()| stdout.flush())
            .context("failed to write the document to stdout")?;
        return Ok(());
    };
    let mut file = atomic_write_file::AtomicWriteFile::open(path)
        .with_context(|| format!("failed to create {}", path.display()))?;
    file.write_all(text.as_bytes())
        .with_context(|| format!("failed to write {}", path.display()))?;
    file.commit()
        .with_context(|| format!("failed to commit {}", path.display()))
}
