//! Sweeping what the crashed process left: its sandboxes (confirmed stopped, their cgroups,
//! uppers and directories removed) and the snapshots no retained checkpoint names.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use rollpoint_sandbox::local::LocalBackend;

use crate::config::RunConfig;
use crate::errors::RunError;
use crate::files::saved::retained_checkpoints;
use crate::stack::build::open_backend;

/// Opens the run's sandboxes with `supervisor` (default: the config's) and sweeps them;
/// `began`, `read_ms` and `chosen_ms` time the resume's steps so far, for the log.
pub(super) fn sweep(
    run_dir: &Path,
    config: &RunConfig,
    supervisor: Option<PathBuf>,
    began: Instant,
    read_ms: u128,
    chosen_ms: u128,
) -> Result<Arc<LocalBackend>, RunError> {
    let ms = |since: Instant| since.elapsed().as_millis();
    let supervisor = supervisor
        .or_else(|| config.supervisor.clone())
        .ok_or_else(|| RunError::setup("supervisor", "no supervisor binary given"))?;
    let backend = open_backend(run_dir, config, supervisor)?;
    let opened_ms = ms(began);
    let swept = backend
        .sweep_orphans()
        .map_err(|e| RunError::setup("sweep", e))?;
    if !swept.is_empty() {
        tracing::info!(
            sandboxes = swept.len(),
            "swept the sandboxes of the crashed run"
        );
    }
    let retained: Vec<String> = retained_checkpoints(run_dir)?;
    let keep: Vec<&str> = retained.iter().map(String::as_str).collect();
    backend
        .sweep_snapshots(&keep)
        .map_err(|e| RunError::setup("sweep", e))?;
    tracing::debug!(
        read_ms,
        chosen_ms,
        opened_ms,
        swept_ms = ms(began),
        "resume: state read, checkpoint chosen, sandboxes opened, the crashed run swept"
    );
    Ok(backend)
}
