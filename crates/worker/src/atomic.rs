//! Atomic, private file writes: temp file (mode 0600) in the target's directory, fsync, rename,
//! fsync the directory. Hand-written rather than `atomic-write-file`/`tempfile` because the
//! temp-file name must follow one known pattern: a launch that finds temp files left by a killed
//! predecessor removes exactly those, and nothing else in the directory.

use std::fs::{self, File, OpenOptions, Permissions};
use std::io::{self, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// Mode of every file the worker writes.
pub const PRIVATE_MODE: u32 = 0o600;

fn file_name(path: &Path) -> io::Result<&str> {
    path.file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "path has no utf-8 file name"))
}

/// The directory holding `path` (`.` for a bare file name).
pub fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// Prefix of temp files that stand in for `path` while it is being replaced.
fn temp_prefix(path: &Path) -> io::Result<String> {
    Ok(format!(".{}.tmp-", file_name(path)?))
}

/// A fresh temp path beside `path`, unique within this process and across processes.
pub fn temp_path(path: &Path) -> io::Result<PathBuf> {
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let name = format!("{}{}-{}", temp_prefix(path)?, std::process::id(), n);
    Ok(parent_dir(path).join(name))
}

/// Creates a new private file (fails if it exists).
pub fn create_private(path: &Path) -> io::Result<File> {
    let file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(PRIVATE_MODE)
        .open(path)?;
    // The umask can only take bits away; set the mode exactly anyway.
    file.set_permissions(Permissions::from_mode(PRIVATE_MODE))?;
    Ok(file)
}

/// fsyncs the directory holding `path`, making a rename or create in it durable.
pub fn sync_parent(path: &Path) -> io::Result<()> {
    File::open(parent_dir(path))?.sync_all()
}

/// Writes `bytes` to `path` atomically with mode 0600. On failure `path` is untouched and no
/// temp file is left behind.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    write_atomic_with(path, |file| file.write_all(bytes))
}

/// Like [`write_atomic`], with the content produced by `fill` writing into the temp file.
pub fn write_atomic_with(
    path: &Path,
    fill: impl FnOnce(&mut File) -> io::Result<()>,
) -> io::Result<()> {
    let temp = temp_path(path)?;
    let outcome = (|| {
        let mut file = create_private(&temp)?;
        fill(&mut file)?;
        file.sync_all()?;
        drop(file);
        fs::rename(&temp, path)?;
        sync_parent(path)
    })();
    if outcome.is_err() {
        // Best effort: the temp file may not exist, or the disk may refuse even this.
        let _ = fs::remove_file(&temp);
    }
    outcome
}

/// Removes temp files a killed predecessor left beside `path`. Returns how many were removed.
pub fn remove_stale_temps(path: &Path) -> io::Result<usize> {
    let prefix = temp_prefix(path)?;
    let mut removed = 0;
    for entry in fs::read_dir(parent_dir(path))? {
        let entry = entry?;
        if entry
            .file_name()
            .to_str()
            .is_some_and(|n| n.starts_with(&prefix))
        {
            fs::remove_file(entry.path())?;
            removed += 1;
        }
    }
    Ok(removed)
}

#[cfg(test)]
#[expect(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn writes_private_file_and_leaves_no_temp() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("result.json");
        write_atomic(&path, b"{}").unwrap();
        write_atomic(&path, b"{\"a\":1}").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"{\"a\":1}");
        let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let names: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec!["result.json"]);
    }

    #[test]
    fn failed_fill_leaves_target_and_no_temp() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("checkpoint");
        write_atomic(&path, b"old").unwrap();
        let err = write_atomic_with(&path, |_| Err(io::Error::other("disk full")));
        assert!(err.is_err());
        assert_eq!(fs::read(&path).unwrap(), b"old");
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn stale_temps_of_this_file_only_are_removed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("checkpoint");
        fs::write(dir.path().join(".checkpoint.tmp-1-0"), b"x").unwrap();
        fs::write(dir.path().join(".other.tmp-1-0"), b"x").unwrap();
        assert_eq!(remove_stale_temps(&path).unwrap(), 1);
        assert!(dir.path().join(".other.tmp-1-0").exists());
    }
}
