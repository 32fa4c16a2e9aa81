//! The copy store: works on any filesystem. Uppers are plain directories; a
//! snapshot is one archive of the upper, a fork restores it into a new
//! upper. Cost grows with the files in the upper.
//!
//! An archive, not a copied tree: a snapshot then writes one file
//! sequentially instead of creating every file, directory and link again.
//! Only the fork, which must produce a live tree, creates files.
//!
//! Both sides walk by descriptor, never by a path longer than one name
//! (`walk`, `restore`, `dirs`): a sandbox can build a directory chain
//! deeper than PATH_MAX, and a path-based archiver (GNU tar, as version 1
//! of this store used) then fails every later resume of the run. The
//! archive is pax (`pax`), written here rather than with a tar crate:
//! the `tar` crate has no sparse files, takes extended-record keys as
//! UTF-8 only, and extracts by path; the format itself is a few hundred
//! lines and stays readable by GNU tar.
//!
//! Layout, version [`COPY_STORE_VERSION`] (recorded in `layout`):
//! `uppers/<id>/{upper,work}` and `snapshots/<id>.tar`. Entries are built
//! under a `.partial-` name, made durable, and renamed into place, so a
//! crash never leaves a half entry under a valid id; open removes
//! leftovers. A store of version 1 (GNU tar archives) is refused by name:
//! its archives are not read.

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::mpsc::RecvTimeoutError;
use std::time::Duration;

use atomic_write_file::AtomicWriteFile;
use nix::fcntl::Flock;

use crate::errors::{Error, Held};
use crate::fsutil::OverlayMounts;
use crate::ids::PARTIAL_PREFIX;
use crate::{
    Listing, SnapshotContent, SnapshotInfo, SnapshotStore, StoreKind, UpperDirs, fsutil, ids,
};

use super::remove::remove_tree;
use super::restore::Restorer;
use super::walk::Archiver;

/// Version of the copy store's on-disk layout: 2 is one pax archive per
/// snapshot, walked and restored by descriptor (1 was GNU tar's archives,
/// made and extracted by path). Stores recording another version are
/// refused.
pub const COPY_STORE_VERSION: u32 = 2;

/// Name of the file recording the layout version in the store directory.
const LAYOUT_FILE: &str = "layout";

/// How often a snapshot flushes its archive while the walk still writes.
const EARLY_FLUSH_PERIOD: Duration = Duration::from_millis(10);

/// Suffix of a snapshot archive after its id.
const ARCHIVE_SUFFIX: &str = ".tar";

#[derive(Debug)]
pub struct CopyStore {
    root: PathBuf,
    closed: bool,
    _lock: Flock<File>,
}

impl CopyStore {
    /// Opens a store in `dir`, created if missing, checks its layout
    /// version, and removes entries left half-built by an interrupted run.
    pub fn open(dir: &Path) -> Result<Self, Error> {
        fsutil::create_dir_all(dir)?;
        let root = std::fs::canonicalize(dir).map_err(Error::io("resolve", dir))?;
        let lock = fsutil::lock_store(&root)?;
        check_layout(&root)?;
        for sub in ["uppers", "snapshots"] {
            let sub = root.join(sub);
            fsutil::create_dir_all(&sub)?;
            for partial in fsutil::list_partials(&sub)? {
                remove_tree(&partial)?;
            }
        }
        Ok(Self {
            root,
            closed: false,
            _lock: lock,
        })
    }

    /// The directory holding `uppers/` and `snapshots/`.
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn live(&self) -> Result<&Path, Error> {
        if self.closed {
            return Err(Error::Closed {
                path: self.root.clone(),
            });
        }
        Ok(&self.root)
    }

    /// An upper's area and the partial name it is built under.
    fn upper_area(&self, sandbox: &str) -> Result<(PathBuf, PathBuf), Error> {
        ids::check("sandbox", sandbox)?;
        let dir = self.live()?.join("uppers");
        Ok((
            dir.join(sandbox),
            dir.join(format!("{PARTIAL_PREFIX}{sandbox}")),
        ))
    }

    /// A snapshot's archive and the partial name it is written under.
    fn archive(&self, snapshot: &str) -> Result<(PathBuf, PathBuf), Error> {
        ids::check("snapshot", snapshot)?;
        let dir = self.live()?.join("snapshots");
        Ok((
            dir.join(format!("{snapshot}{ARCHIVE_SUFFIX}")),
            dir.join(format!("{PARTIAL_PREFIX}{snapshot}{ARCHIVE_SUFFIX}")),
        ))
    }
}

/// Reads the store's layout version, or records the current one in a new
/// (or never versioned) store.
fn check_layout(root: &Path) -> Result<(), Error> {
    let path = root.join(LAYOUT_FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            let found = text.trim();
            if found == COPY_STORE_VERSION.to_string() {
                Ok(())
            } else {
                Err(Error::StoreVersion {
                    path,
                    found: found.to_owned(),
                    supported: COPY_STORE_VERSION,
                })
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            // atomic-write-file: temp file, fsync, rename, fsync of the directory.
            AtomicWriteFile::open(&path)
                .and_then(|mut file| {
                    file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
                    writeln!(file, "{COPY_STORE_VERSION}")?;
                    file.commit()
                })
                .map_err(Error::io("write", &path))
        }
        Err(e) => Err(Error::io("read", &path)(e)),
    }
}

/// Writes `upper`'s content as an archive at `archive` (mode 0600) and
/// fsyncs it.
fn write_archive(upper: &Path, archive: &Path) -> Result<(), Error> {
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(archive)
        .map_err(Error::io("create", archive))?;
    // A snapshot must survive a host crash like a btrfs one, whose
    // snapshot commits a transaction. Flushing while the walk still
    // writes overlaps the disk writes with its reading, so the final
    // fsync has little left (figures in docs/benchmarks.md).
    let (stop, stopped) = std::sync::mpsc::channel::<()>();
    let early = std::thread::scope(|scope| {
        let file = &file;
        let flusher = scope.spawn(move || {
            while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(EARLY_FLUSH_PERIOD) {
                file.sync_data()?;
            }
            Ok(())
        });
        let written = Archiver::write(upper, archive, file);
        drop(stop);
        let flushed = flusher
            .join()
            .unwrap_or_else(|_| Err(std::io::Error::other("early flush thread panicked")));
        written.map(|()| flushed)
    })?;
    // An error seen by an early flush is not reported again by a later
    // fsync of the same open file, so it fails the snapshot here.
    early
        .and_then(|()| file.sync_all())
        .map_err(Error::io("fsync", archive))
}

/// Renames a finished partial entry into place and makes the rename durable.
fn publish(partial: &Path, target: &Path) -> Result<(), Error> {
    std::fs::rename(partial, target).map_err(Error::io("rename", partial))?;
    if let Some(parent) = target.parent() {
        fsutil::fsync_dir(parent)?;
    }
    Ok(())
}

impl SnapshotStore for CopyStore {
    fn kind(&self) -> StoreKind {
        StoreKind::Copy
    }

    fn create_upper(&self, sandbox: &str) -> Result<UpperDirs, Error> {
        let (area, _) = self.upper_area(sandbox)?;
        match std::fs::create_dir(&area) {
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                return Err(Error::UpperExists {
                    sandbox: sandbox.to_owned(),
                    path: area,
                });
            }
            other => other.map_err(Error::io("create directory", &area))?,
        }
        let dirs = UpperDirs {
            upper: area.join("upper"),
            work: area.join("work"),
        };
        fsutil::create_dir(&dirs.upper)?;
        fsutil::create_dir(&dirs.work)?;
        Ok(dirs)
    }

    fn snapshot(&self, sandbox: &str, snapshot: &str) -> Result<SnapshotInfo, Error> {
        let (source, _) = self.upper_area(sandbox)?;
        let (target, partial) = self.archive(snapshot)?;
        Held::Upper(sandbox).check(&source, true)?;
        Held::Snapshot(snapshot).check(&target, false)?;
        crate::retry_once(
            sandbox,
            snapshot,
            || {
                write_archive(&source.join("upper"), &partial)?;
                publish(&partial, &target)
            },
            || {
                let _ = remove_tree(&partial);
            },
        )?;
        Ok(SnapshotInfo {
            id: snapshot.to_owned(),
            sandbox: sandbox.to_owned(),
            content: SnapshotContent::Archive(target),
        })
    }

    fn fork(&self, snapshot: &str, new_sandbox: &str) -> Result<UpperDirs, Error> {
        let (source, _) = self.archive(snapshot)?;
        let (target, partial) = self.upper_area(new_sandbox)?;
        Held::Snapshot(snapshot).check(&source, true)?;
        Held::Upper(new_sandbox).check(&target, false)?;
        let built = fsutil::create_dir(&partial)
            .and_then(|()| fsutil::create_dir(&partial.join("upper")))
            .and_then(|()| Restorer::restore(snapshot, &source, &partial.join("upper")))
            .and_then(|()| fsutil::create_dir(&partial.join("work")))
            .and_then(|()| publish(&partial, &target));
        if let Err(e) = built {
            let _ = remove_tree(&partial);
            return Err(e);
        }
        Ok(UpperDirs {
            upper: target.join("upper"),
            work: target.join("work"),
        })
    }

    fn delete_snapshot(&self, snapshot: &str) -> Result<(), Error> {
        let (archive, _) = self.archive(snapshot)?;
        Held::Snapshot(snapshot).check(&archive, true)?;
        // One unlink: atomic, so no partial name is needed.
        std::fs::remove_file(&archive).map_err(Error::io("remove", &archive))?;
        if let Some(parent) = archive.parent() {
            fsutil::fsync_dir(parent)?;
        }
        Ok(())
    }

    fn destroy_upper_seen(&self, sandbox: &str, mounts: &OverlayMounts) -> Result<(), Error> {
        let (area, partial) = self.upper_area(sandbox)?;
        Held::Upper(sandbox).check(&area, true)?;
        if mounts.uses(&area) {
            return Err(Error::UpperMounted {
                sandbox: sandbox.to_owned(),
                path: area,
            });
        }
        // Moved aside first, so a crash mid-removal leaves only a leftover
        // that open clears.
        std::fs::rename(&area, &partial).map_err(Error::io("rename", &area))?;
        remove_tree(&partial)
    }

    fn send(&self, snapshot: &str, parent: Option<&str>, out: &Path) -> Result<(), Error> {
        if parent.is_some() {
            return Err(Error::Transport {
                snapshot: snapshot.to_owned(),
                message: "the copy store sends whole archives only".to_owned(),
            });
        }
        let (archive, _) = self.archive(snapshot)?;
        Held::Snapshot(snapshot).check(&archive, true)?;
        std::fs::copy(&archive, out)
            .map(drop)
            .map_err(Error::io("copy", &archive))
    }

    fn receive(&self, snapshot: &str, stream: &Path) -> Result<(), Error> {
        let (target, partial) = self.archive(snapshot)?;
        Held::Snapshot(snapshot).check(&target, false)?;
        let copied = std::fs::copy(stream, &partial)
            .map_err(Error::io("copy", stream))
            .and_then(|_| {
                std::fs::File::open(&partial)
                    .and_then(|f| f.sync_all())
                    .map_err(Error::io("fsync", &partial))
            })
            .and_then(|()| publish(&partial, &target));
        if copied.is_err() {
            let _ = remove_tree(&partial);
        }
        copied
    }

    fn list(&self) -> Result<Listing, Error> {
        let root = self.live()?;
        let mut snapshots: Vec<String> = fsutil::list_names(&root.join("snapshots"))?
            .into_iter()
            .filter_map(|name| {
                name.strip_suffix(ARCHIVE_SUFFIX)
                    .filter(|id| ids::is_valid(id))
                    .map(str::to_owned)
            })
            .collect();
        snapshots.sort();
        Ok(Listing {
            uppers: fsutil::list_ids(&root.join("uppers"))?,
            snapshots,
        })
    }

    fn close(&mut self) -> Result<(), Error> {
        // Nothing mounted; closing only stops further use.
        self.closed = true;
        Ok(())
    }
}
