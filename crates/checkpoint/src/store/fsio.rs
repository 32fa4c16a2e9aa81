//! The few file operations checkpoints are made of, each durable: files are
//! created 0600 and fsynced, names appear by rename or hard link, and the
//! directory is fsynced after. Hand-written: `atomic-write-file` neither
//! sets the mode nor publishes by hard link (create-if-absent), which the
//! manifest needs so that it is never replaced.

use std::fs::{self, File, OpenOptions};
use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::errors::StoreError;

static TEMP_SEQ: AtomicU64 = AtomicU64::new(0);

/// A fresh dot-file name in `dir` for a file that becomes `final_name`.
pub(crate) fn temp_path(dir: &Path, final_name: &str) -> PathBuf {
    let seq = TEMP_SEQ.fetch_add(1, Ordering::Relaxed);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or_default();
    dir.join(format!(
        ".{final_name}.{}.{seq}.{nanos}.tmp",
        std::process::id()
    ))
}

/// Creates a new file, mode 0600, failing if it exists.
pub(crate) fn create_new(path: &Path) -> Result<File, StoreError> {
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(StoreError::io(path))
}

pub(crate) fn fsync_dir(dir: &Path) -> Result<(), StoreError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(StoreError::io(dir))
}

/// Creates `dir` and its missing parents (mode 0700), fsyncing each parent
/// that gained an entry so the new names survive a crash.
pub(crate) fn create_dirs(dir: &Path) -> Result<(), StoreError> {
    let mut missing = Vec::new();
    let mut cur = dir;
    while !cur.as_os_str().is_empty() && !cur.exists() {
        missing.push(cur);
        match cur.parent() {
            Some(parent) => cur = parent,
            None => break,
        }
    }
    for created in missing.iter().rev() {
        match fs::DirBuilder::new().mode(0o700).create(created) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(StoreError::io(*created)(e)),
        }
        if let Some(parent) = created.parent().filter(|p| !p.as_os_str().is_empty()) {
            fsync_dir(parent)?;
        }
    }
    Ok(())
}

/// Writes `bytes` to `path` atomically: temp file, fsync, rename over,
/// fsync the directory.
pub(crate) fn replace(path: &Path, bytes: &[u8]) -> Result<(), StoreError> {
    let (dir, name) = split(path)?;
    let temp = temp_path(dir, name);
    let result = (|| {
        let mut file = create_new(&temp)?;
        file.write_all(bytes).map_err(StoreError::io(&temp))?;
        file.sync_all().map_err(StoreError::io(&temp))?;
        fs::rename(&temp, path).map_err(StoreError::io(path))?;
        fsync_dir(dir)
    })();
    if result.is_err() {
        let _ignored = fs::remove_file(&temp);
    }
    result
}

/// Publishes `bytes` as `path` only if `path` does not exist: temp file,
/// fsync, hard link, fsync the directory. Of two racing writers exactly one
/// publishes. Returns false when `path` already existed (nothing written).
pub(crate) fn publish(path: &Path, bytes: &[u8]) -> Result<bool, StoreError> {
    let (dir, name) = split(path)?;
    let temp = temp_path(dir, name);
    let result = (|| {
        let mut file = create_new(&temp)?;
        file.write_all(bytes).map_err(StoreError::io(&temp))?;
        file.sync_all().map_err(StoreError::io(&temp))?;
        match fs::hard_link(&temp, path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => return Ok(false),
            Err(e) => return Err(StoreError::io(path)(e)),
        }
        fsync_dir(dir)?;
        Ok(true)
    })();
    let _ignored = fs::remove_file(&temp);
    result
}

fn split(path: &Path) -> Result<(&Path, &str), StoreError> {
    let dir = path
        .parent()
        .ok_or_else(|| StoreError::invalid(path.to_owned(), "has no parent directory"))?;
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| StoreError::invalid(path.to_owned(), "has no file name"))?;
    Ok((dir, name))
}

/// Reads a whole small file.
pub(crate) fn read(path: &Path) -> Result<Vec<u8>, StoreError> {
    fs::read(path).map_err(StoreError::io(path))
}
