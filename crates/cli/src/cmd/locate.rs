//! Finding the static supervisor binary that goes into sandboxes, and reading
//! token files.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

/// `explicit`, else `ROLLPOINT_SUPERVISOR`, else the static build in the
/// target directory, else the binary next to this one.
pub fn supervisor(explicit: Option<&PathBuf>) -> anyhow::Result<PathBuf> {
    if let Some(p) = explicit
        .cloned()
        .or_else(|| std::env::var_os("ROLLPOINT_SUPERVISOR").map(PathBuf::from))
    {
        if p.is_file() {
            return Ok(p);
        }
        bail!("supervisor binary {} does not exist", p.display());
    }
    let exe = std::env::current_exe().context("cannot locate the rollpoint binary")?;
    let dir = exe
        .parent()
        .context("the rollpoint binary has no directory")?;
    let mut candidates = Vec::new();
    if let Some(target) = dir.parent() {
        for triple in ["x86_64-unknown-linux-musl", "x86_64-unknown-linux-gnu"] {
            candidates.push(
                target
                    .join(triple)
                    .join("release")
                    .join("rollpoint-supervisor"),
            );
        }
    }
    candidates.push(dir.join("rollpoint-supervisor"));
    candidates
        .into_iter()
        .find(|p| p.is_file())
        .context("rollpoint-supervisor not found: build it with scripts/build-static, or pass --supervisor / set ROLLPOINT_SUPERVISOR")
}

/// A bearer token from a file (surrounding whitespace dropped; empty is an
/// error).
pub fn token(path: &Path) -> anyhow::Result<String> {
    let token = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the token file {}", path.display()))?;
    let token = token.trim();
    anyhow::ensure!(
        !token.is_empty(),
        "the token file {} is empty",
        path.display()
    );
    Ok(token.to_owned())
}
