//! Retention: keep the latest K published checkpoints (the one `LATEST`
//! names always among them), delete older ones, unpublished ones (a commit
//! that never reached `LATEST`) and stray temp files. Run by the
//! controller after publishing, while no commit is in progress.

use std::fs;
use std::path::Path;

use super::published::{CHECKPOINT_FILE, latest, read_checkpoint};
use crate::errors::StoreError;

/// How many checkpoints are kept by default: the latest and the one before.
pub const DEFAULT_KEEP: usize = 2;

/// Deletes all but the latest `keep` (at least 1) published checkpoints.
/// Returns the ids deleted.
pub fn prune(run_dir: &Path, keep: usize) -> Result<Vec<String>, StoreError> {
    let root = super::checkpoints_dir(run_dir);
    let entries = match fs::read_dir(&root) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(StoreError::io(&root)(e)),
    };
    let latest = latest(run_dir)?;
    // A checkpoint.json newer than the one LATEST names never reached the
    // publish point (a crash between the two writes).
    let latest_created = match &latest {
        Some(id) => Some(read_checkpoint(run_dir, id)?.created_unix_ms),
        None => None,
    };
    let mut published = Vec::new();
    let mut doomed = Vec::new();
    for entry in entries {
        let entry = entry.map_err(StoreError::io(&root))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let path = entry.path();
        if name.starts_with('.') {
            doomed.push((name, path));
            continue;
        }
        if !path.is_dir() {
            continue;
        }
        if Some(&name) == latest.as_ref() {
            continue;
        }
        // An unreadable or unpublished checkpoint cannot be restored: gone.
        match read_checkpoint(run_dir, &name) {
            Ok(doc)
                if path.join(CHECKPOINT_FILE).exists()
                    && latest_created.is_some_and(|t| doc.created_unix_ms <= t) =>
            {
                published.push((doc.created_unix_ms, name, path));
            }
            _ => doomed.push((name, path)),
        }
    }
    published.sort();
    let others = keep.max(1) - usize::from(latest.is_some());
    let older = published.len().saturating_sub(others);
    doomed.extend(published.drain(..older).map(|(_, name, path)| (name, path)));

    let mut deleted = Vec::new();
    for (name, path) in doomed {
        let removed = if path.is_dir() {
            fs::remove_dir_all(&path)
        } else {
            fs::remove_file(&path)
        };
        removed.map_err(StoreError::io(&path))?;
        if !name.starts_with('.') {
            deleted.push(name);
        }
    }
    super::fsio::fsync_dir(&root)?;
    deleted.sort();
    Ok(deleted)
}
