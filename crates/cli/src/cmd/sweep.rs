//! `rollpoint sweep RUN_DIR`: reclaims what a run no longer needs. Sandboxes
//! whose owner process is gone (a crashed run) are killed and torn down, and
//! every snapshot that no retained checkpoint names is deleted. A checkpoint
//! is retained while its directory `RUN_DIR/checkpoints/<id>/` exists.

use std::path::{Path, PathBuf};

use anyhow::Context;
use rollpoint_sandbox::local::{LocalBackend, LocalOptions};

use super::locate;

#[derive(Debug, clap::Args)]
pub struct SweepArgs {
    /// The run directory (`rollpoint run`'s, or any owner's).
    pub run_dir: PathBuf,
}

/// Where the owner keeps its sandboxes inside a run directory.
pub const OWNER_DIR: &str = "owner";

/// Checkpoint ids with a directory under `RUN_DIR/checkpoints/`.
fn retained(run_dir: &Path) -> anyhow::Result<Vec<String>> {
    let dir = run_dir.join("checkpoints");
    let entries = match std::fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("cannot list {}", dir.display())),
    };
    let mut ids: Vec<String> = entries
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    ids.sort();
    Ok(ids)
}

pub fn run(args: &SweepArgs) -> anyhow::Result<()> {
    let owner_dir = args.run_dir.join(OWNER_DIR);
    anyhow::ensure!(
        owner_dir.is_dir(),
        "{} holds no sandboxes ({} is missing)",
        args.run_dir.display(),
        owner_dir.display()
    );
    // Never under a live run: its sandboxes are not orphans.
    let _lock = rollpoint_run::claim::lock::RunLock::acquire(&args.run_dir)?;
    // Sweeping starts nothing, but the backend checks its supervisor exists.
    let supervisor = locate::supervisor(None)?;
    let backend = LocalBackend::open(&owner_dir, LocalOptions::new(supervisor))
        .with_context(|| format!("cannot open the sandboxes of {}", args.run_dir.display()))?;
    let sandboxes = backend.sweep_orphans()?;
    let keep = retained(&args.run_dir)?;
    let keep: Vec<&str> = keep.iter().map(String::as_str).collect();
    let snapshots = backend.sweep_snapshots(&keep)?;
    for id in &sandboxes {
        println!("destroyed sandbox {id} (its owner is gone)");
    }
    for id in &snapshots {
        println!("deleted snapshot {id}");
    }
    println!(
        "swept {}: {} sandboxes, {} snapshots; retained checkpoints: {}",
        args.run_dir.display(),
        sandboxes.len(),
        snapshots.len(),
        if keep.is_empty() {
            "none".to_owned()
        } else {
            keep.join(", ")
        }
    );
    Ok(())
}
